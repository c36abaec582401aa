"""Import rule files (AGENTS.md, CLAUDE.md, .cursorrules, copilot-instructions.md …).

A file is split into rules: bullets and numbered items (with their wrapped continuation
lines), and prose paragraphs; headings, code fences, HTML comments, tables and YAML
front matter are dropped. Every rule goes through the detector (a rules file is standing
by construction, so only text the detector is confident is a one-off request is
skipped) and the allocator, and is stored with `source=<path>`.

Re-import is idempotent: items from that source are replaced, so editing the file moves
the ledger with it. `watch_rules` re-imports on change (watchfiles).

`routing_stats` exports what may be pooled across users (DESIGN §5 privacy split): lane
decisions and numeric features only, never text.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from continual_lsp.config import Settings
from continual_lsp.lanes.reading import read
from continual_lsp.lanes.routing.allocator import LaneItem, route_correction
from continual_lsp.lanes.routing.detector import detect
from continual_lsp.store.db import Store

RULE_FILES = (
    "AGENTS.md",
    "CLAUDE.md",
    ".cursorrules",
    ".clinerules",
    ".github/copilot-instructions.md",
    "copilot-instructions.md",
    ".windsurfrules",
)
MIN_LEN, MAX_LEN = 5, 600
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+(.*)$")
_HEADING = re.compile(r"^\s*(#{1,6}\s|={3,}\s*$|-{3,}\s*$)")


def split_rules(text: str) -> list[str]:
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    lines = text.splitlines()
    if lines and lines[0].strip() == "---":  # YAML front matter (.mdc rules)
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
        if end is not None:
            lines = lines[end + 1 :]
    rules: list[str] = []
    current: list[str] = []
    in_fence = False

    def flush() -> None:
        if current:
            rule = " ".join(s.strip() for s in current).strip()
            rule = re.sub(r"\s+", " ", rule)
            if len(rule) >= MIN_LEN and not rule.endswith(":"):
                rules.append(rule[:MAX_LEN])
            current.clear()

    for line in lines:
        if line.strip().startswith(("```", "~~~")):
            flush()
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        if not line.strip() or _HEADING.match(line) or line.lstrip().startswith("|"):
            flush()
            continue
        m = _BULLET.match(line)
        if m:
            flush()
            current.append(m.group(1))
        elif current and (line.startswith((" ", "\t")) or not _BULLET.match(line)):
            current.append(line)  # continuation of a wrapped bullet, or paragraph text
        else:
            current.append(line)
    flush()
    return rules


def import_rules(
    store: Store,
    path: str | Path,
    settings: Settings | None = None,
    *,
    use_llm: bool | None = None,
) -> list[LaneItem]:
    """Route every rule of one file; replaces what an earlier import of it stored."""
    settings = settings or Settings()
    path = Path(path)
    source = f"file:{path.resolve()}"
    previous = {it["text"]: it for it in store.lane_items() if it.get("source") == source}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        text = ""
    counts = {c["id"]: int(c["count"]) for c in store.clusters()}
    items: list[LaneItem] = []
    kept: set[str] = set()
    for rule in split_rules(text):
        old = previous.get(rule)
        if old is not None:
            # Unchanged rule: keep its item as it is (a reviewer's revert stays reverted).
            kept.add(old["id"])
            items.append(LaneItem.from_row(old, counts.get(old["cluster_id"] or "", 1)))
            continue
        det = detect(read(rule), use_llm=use_llm)
        if not det.is_correction and det.confidence >= 0.75:
            continue  # clearly a request (an example prompt quoted in the file)
        # A rule file is standing guidance by construction, like a denial's comment.
        item = route_correction(
            store, rule, None, settings, denial=True, source=source, use_llm=use_llm
        )
        if item is not None:
            items.append(item)
    for old in previous.values():
        if old["id"] not in kept and old["active"]:
            store.update_lane_item(old["id"], active=False)  # the rule left the file
    store.append_event("rules_import", {"source": source, "rules": len(items)})
    return items


def discover_rule_files(workspace: str | Path) -> list[Path]:
    root = Path(workspace)
    return [root / name for name in RULE_FILES if (root / name).is_file()]


def watch_rules(
    paths: Iterable[str | Path],
    callback: Callable[[Path], Any],
    *,
    stop_event: threading.Event | None = None,
) -> None:
    """Block, calling `callback(path)` whenever one of `paths` changes (or appears).

    Watches the parent directories (editors replace files by rename, which a watch on
    the file itself would lose). Run it in a thread; set `stop_event` to end it.
    """
    from watchfiles import watch

    targets = {Path(p).resolve() for p in paths}
    dirs = {str(p.parent) for p in targets}
    for changes in watch(*dirs, stop_event=stop_event, debounce=200, rust_timeout=500):
        changed = {Path(p).resolve() for _, p in changes}
        for target in sorted(targets & changed):
            callback(target)


def routing_stats(store: Store) -> dict[str, Any]:
    """Poolable routing data: lane decisions and numeric/categorical features, no text."""
    counts = {c["id"]: int(c["count"]) for c in store.clusters()}
    decisions = []
    for row in store.lane_items():
        spec = row.get("spec") or {}
        cue = row.get("cue") or {}
        decisions.append(
            {
                "lane": row["lane"],
                "kind": row.get("kind") or "other",
                "checkable": row["lane"] == "CODE",
                "guard_built": bool(spec.get("rules")),
                "rule_kinds": sorted({r.get("kind", "") for r in spec.get("rules", [])}),
                "promoted": bool(spec.get("promoted")),
                "cluster_size": counts.get(row.get("cluster_id") or "", 1),
                "confidence": round(float(row["confidence"]), 3),
                "active": bool(row["active"]),
                "from_file": bool((row.get("source") or "").startswith("file:")),
                "cue_tools": len(cue.get("tools", [])),
                "cue_paths": len(cue.get("paths", [])),
                "cue_words": len(cue.get("words", [])),
            }
        )
    by_lane = Counter(d["lane"] for d in decisions)
    return {
        "decisions": decisions,
        "by_lane": dict(by_lane),
        "context_tokens": int(store.counter("context_tokens")),
        "notes_only_tokens": int(store.counter("notes_only_tokens")),
    }
