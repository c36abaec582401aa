"""Context tax: tokens the context lane carries per call vs a notes-only agent.

    python bench/context_tax.py [--data PATH] [--turns 200] [--seed 0]

A fresh store receives the dev corrections (every row the dev file labels as a
correction) through the real pipeline (`route_correction`: detector, clusters,
allocator). Recurrence is simulated from the clusters: rows the dev file labels WEIGHTS
(behavioural, "plausibly recurs") arrive `weights_recurrence` times, so their cluster
reaches the bar; every other row arrives once.

Then `--turns` agent calls are simulated. Each call has a task text and the calls made so
far in that task, drawn from a pool of coding turns (the dev file's own requests, plus
hand-written turns touching files, commands and git, listed below). For each call the
context lane injects only bullets whose cue matches (`bullets_for_turn`), and the counters
record what it carried against what a notes-only agent carries (every correction's text,
every call). Three phases:

1. before consolidation: WEIGHTS principles are still bullets (their adapters not yet
   promoted); CODE rules with a built guard carry nothing (the guard enforces them);
2. after consolidation: WEIGHTS items promoted (simulated: the gate passed), so their
   bullets leave the context;
3. ablation: the same bullets without cues (injected every call), to show what cueing buys.

Token counts use the whitespace estimate of `lanes.context.count_tokens` (pass
`--tokenizer smollm` to count with the embedded model's tokenizer when it is installed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from continual_lsp.config import Settings  # noqa: E402
from continual_lsp.lanes.context import bullet_items, bullets_for_turn, count_tokens  # noqa: E402
from continual_lsp.lanes.routing.allocator import route_correction  # noqa: E402
from continual_lsp.store.db import Store  # noqa: E402
from continual_lsp.tools.base import ToolCall  # noqa: E402

DEFAULT_DATA = Path(
    os.environ.get("CONTINUAL_LSP_DEV_DATA", str(REPO.parent / "shared/data/corrections-dev.jsonl"))
)


def _c(tool: str, **args: object) -> ToolCall:
    return ToolCall(tool=tool, arguments=dict(args))  # type: ignore[arg-type]


# Hand-written turns (task text, calls so far in the task): ordinary coding work.
TURNS: list[tuple[str, list[ToolCall]]] = [
    ("Fix the failing test in tests/test_ops.py", [_c("read", path="tests/test_ops.py")]),
    ("Fix the failing test in tests/test_ops.py", [_c("bash", cmd="pytest -q tests/test_ops.py")]),
    ("Add a subtract function to the calculator", [_c("read", path="src/calc/ops.py")]),
    (
        "Add a subtract function to the calculator",
        [_c("edit_lines", path="src/calc/ops.py", start=10, end=12, content="x")],
    ),
    ("Rename the helper in utils.py", [_c("grep", pat="helper")]),
    ("Install lodash and use it in the app", [_c("bash", cmd="npm install lodash")]),
    ("Update the README with usage instructions", [_c("read", path="README.md")]),
    ("Make the header sticky", [_c("read", path="src/components/Header.tsx")]),
    ("Style the login button", [_c("write", path="src/styles/button.css", content="x")]),
    ("Commit the fix", [_c("bash", cmd="git status")]),
    ("Bump the version", [_c("read", path="package.json")]),
    ("Add logging to the sync worker", [_c("read", path="app/src/main/kotlin/SyncWorker.kt")]),
    ("Why does the build fail?", [_c("bash", cmd="cargo build")]),
    ("Speed up the query in the users endpoint", [_c("read", path="api/users.ts")]),
    ("Type-check the project", []),
    ("Add a docstring to parse_config", [_c("read", path="src/config.py")]),
    ("Write a migration for the new column", [_c("glob", pat="migrations/*.py")]),
    ("Clean up the Dockerfile", [_c("read", path="Dockerfile")]),
    ("Translate the error messages", [_c("grep", pat="raise ValueError")]),
    ("Look at the flaky CI job", [_c("read", path=".github/workflows/ci.yml")]),
]


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def simulate(
    store: Store, pool: list[tuple[str, list[ToolCall]]], turns: int, seed: int, tok
) -> tuple[float, float]:
    before_c = store.counter("context_tokens")
    before_n = store.counter("notes_only_tokens")
    rng = random.Random(seed)
    for _ in range(turns):
        task, calls = rng.choice(pool)
        bullets_for_turn(store, task, calls, tokenizer=tok)
    carried = store.counter("context_tokens") - before_c
    notes = store.counter("notes_only_tokens") - before_n
    return carried / turns, notes / turns


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer", choices=["whitespace", "smollm"], default="whitespace")
    args = ap.parse_args()
    tok = None
    if args.tokenizer == "smollm":
        from continual_lsp.config import EMBEDDED_MODEL
        from continual_lsp.policy.model_files import load_model_and_tokenizer

        _, hf_tok = load_model_and_tokenizer(EMBEDDED_MODEL)
        tok = lambda text: len(hf_tok.encode(text, add_special_tokens=False))  # noqa: E731
    rows = load(args.data)
    settings = Settings()
    pool = list(TURNS) + [(r["text"], []) for r in rows if r["lane"] == "NONE"]
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "tax.sqlite3")
        lanes: dict[str, int] = {}
        for r in rows:
            if r["lane"] == "NONE":
                continue
            times = settings.weights_recurrence if r["lane"] == "WEIGHTS" else 1
            item = None
            for _ in range(times):
                item = route_correction(store, r["text"], None, settings, use_llm=False)
            if item is not None:
                lanes[item.lane] = lanes.get(item.lane, 0) + 1
        active = store.lane_items(active_only=True)
        print(f"routed {sum(lanes.values())} corrections: {lanes}")
        print(f"lane items: {len(active)}, of which bullets: {len(bullet_items(store))}")
        notes_total = sum(count_tokens("- " + it["text"], tok) for it in active)
        print(f"notes-only agent carries {notes_total} tokens on every call")

        c1, n1 = simulate(store, pool, args.turns, args.seed, tok)
        print("\nphase 1 (before consolidation: WEIGHTS principles still bullets)")
        print(
            f"  per call: context lane {c1:.1f} tokens vs notes-only {n1:.1f}  ratio {c1 / n1:.1%}"
        )

        for it in store.lane_items(lane="WEIGHTS", active_only=True):
            spec = dict(it["spec"] or {})
            spec["promoted"] = "simulated"
            store.update_lane_item(it["id"], spec=spec)
        c2, n2 = simulate(store, pool, args.turns, args.seed, tok)
        print("phase 2 (after consolidation: promoted WEIGHTS bullets left the context)")
        print(
            f"  per call: context lane {c2:.1f} tokens vs notes-only {n2:.1f}  ratio {c2 / n2:.1%}"
        )

        # Ablation: the phase-1 bullets without cues.
        for it in store.lane_items(lane="WEIGHTS", active_only=True):
            spec = dict(it["spec"] or {})
            spec.pop("promoted", None)
            store.update_lane_item(it["id"], spec=spec)
        uncued = sum(count_tokens("- " + it["text"], tok) for it in bullet_items(store))
        print(
            f"ablation (phase-1 bullets, no cues): {uncued} tokens per call, ratio {uncued / n1:.1%}"
        )
        store.close()
    print(
        "\nsummary: "
        + json.dumps(
            {
                "ratio_before_consolidation": round(c1 / n1, 3),
                "ratio_after_consolidation": round(c2 / n2, 3),
                "ratio_no_cues": round(uncued / n1, 3),
                "goal": 0.40,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
