"""Import ten real rules files and report what the lanes make of them.

    python bench/rules_import.py [--dir bench/data/rules-files]

Each file (bench/data/rules-files, copied from repositories of the dev set, see its
README) is imported into a fresh store through the real path (`import_rules`: split,
detector, clusters, allocator, guard compiler). Reported per file: rules found, guards
compiled (CODE: a self-checked declarative spec), rules a function could check but no
guard compiled from (routed on, their reason says so), items in WEIGHTS,
bullets (what the context lane may inject), and the tokens the context lane carries per
call, averaged over a fixed set of coding turns, against the baseline of the same run: the
whole file pasted into every prompt. Token counts use the whitespace estimate of
`lanes.context.count_tokens`.

Recurrence: an imported rule arrives once, so behavioural rules stay CONTEXT bullets
until their cluster recurs (`weights_recurrence`); WEIGHTS here counts only rules whose
cluster already reached the bar inside one file.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from continual_lsp.lanes.context import bullets_for_turn, count_tokens  # noqa: E402
from continual_lsp.lanes.rules_import import import_rules  # noqa: E402
from continual_lsp.store.db import Store  # noqa: E402
from continual_lsp.tools.base import ToolCall  # noqa: E402

# Ordinary coding turns: a task text and the call the agent is about to make.
TURNS: list[tuple[str, ToolCall]] = [
    ("Fix the failing unit test in the parser", ToolCall(tool="bash", arguments={"cmd": "npm test"})),
    ("Add a settings page", ToolCall(tool="write", arguments={"path": "src/pages/Settings.tsx", "content": "x"})),
    ("Rename the config loader", ToolCall(tool="edit", arguments={"path": "src/config.py", "old": "a", "new": "b"})),
    ("Commit the change", ToolCall(tool="bash", arguments={"cmd": "git commit -m 'fix: x'"})),
    ("Update the README install section", ToolCall(tool="edit", arguments={"path": "README.md", "old": "a", "new": "b"})),
    ("Find where errors are logged", ToolCall(tool="grep", arguments={"pattern": "logger"})),
]  # fmt: skip


def measure(path: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "import.sqlite3")
        items = import_rules(store, path, use_llm=False)
        lanes = [it.lane for it in items]
        guards = sum(1 for it in items if it.lane == "CODE" and it.spec.get("rules"))
        carried = [
            sum(count_tokens("- " + b) for b in bullets_for_turn(store, task, [call], count=False))
            for task, call in TURNS
        ]
        bullets = sum(1 for it in items if it.lane in ("CONTEXT", "WEIGHTS"))
        return {
            "rules": len(items),
            "guards": guards,
            "no_guard": sum(1 for it in items if "no guard compiled" in it.reason),
            "weights": lanes.count("WEIGHTS"),
            "bullets": bullets,
            "tokens_per_call": sum(carried) / len(carried),
            "file_tokens": count_tokens(path.read_text(encoding="utf-8", errors="replace")),
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=REPO / "bench/data/rules-files")
    args = ap.parse_args()
    files = sorted(p for p in args.dir.glob("*/*") if p.name != "LICENSE")
    cols = [
        "rules",
        "guards",
        "no_guard",
        "weights",
        "bullets",
        "tokens_per_call",
        "file_tokens",
    ]
    print(f"{'file':58} " + " ".join(f"{c:>15}" for c in cols))
    total = dict.fromkeys(cols, 0.0)
    for path in files:
        row = measure(path)
        for c in cols:
            total[c] += row[c]
        name = str(path.relative_to(args.dir))[:58]
        print(f"{name:58} " + " ".join(f"{row[c]:15.1f}" for c in cols))
    print(
        f"{'total (' + str(len(files)) + ' files)':58} "
        + " ".join(f"{total[c]:15.1f}" for c in cols)
    )
    ratio = total["tokens_per_call"] / total["file_tokens"] if total["file_tokens"] else 0.0
    print(
        f"\ncontext tokens per call vs the whole file in every prompt (baseline, same run): "
        f"{total['tokens_per_call']:.0f} vs {total['file_tokens']:.0f} tokens, ratio {ratio:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
