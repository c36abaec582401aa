"""Guard safety: a guard never stands in the reviewer's way (issue 31).

    python bench/guard_safety.py [--cases PATH] [--out PATH]

Each case of bench/data/guard_safety/cases.json is one denial on a real workspace
(bench/data/guard_safety/workspace, copied to a temporary directory): the call the agent
proposed, the reviewer's comment, and the calls that must stay allowed afterwards (the fix
the comment asks for, ordinary later work elsewhere) and, for a standing rule, the calls
that must be blocked. The comment goes through the lanes exactly as the agent's deny path
sends it (`LanesFacade.route_correction(..., is_denial=True)` on a fresh store with the
MiniLM embedder and the offline allocator); every listed call is then checked with
`LanesFacade.check_guards` and the preview the agent's tool runner computes for it.

A must-block call counts as blocked when a guard blocks or rewrites it (a rewrite is how
a substitution rule keeps the violation from running). A must-allow call counts as a
false block when a guard blocks it (a rewrite of it is reported apart).

The cases were written for this bench as review comments, not taken from the dev set, and
the rules were not tuned to them; the failures left are listed in the output.

Writes bench/results/guard_safety.json: {"cases", "false_blocks", "must_allow",
"violations_blocked", ...} and the per-case details.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from continual_lsp.agent.lanes_facade import LanesFacade  # noqa: E402
from continual_lsp.config import Settings  # noqa: E402
from continual_lsp.lanes.scope import TASK_KIND  # noqa: E402
from continual_lsp.policy.model_files import cpu_model  # noqa: E402
from continual_lsp.store import Store  # noqa: E402
from continual_lsp.tools.base import Preview, ToolCall  # noqa: E402
from continual_lsp.tools.runner import ToolRunner  # noqa: E402

DATA = ROOT / "bench" / "data" / "guard_safety"


def to_call(spec: dict[str, Any]) -> ToolCall:
    """A case's call: {tool, ...arguments}; `content_repeat: [line, n]` is `line` n times."""
    args = {k: v for k, v in spec.items() if k != "tool"}
    if "content_repeat" in args:
        line, n = args.pop("content_repeat")
        args["content"] = line * int(n)
    return ToolCall(tool=spec["tool"], arguments=args)


@dataclass
class Proposal:
    """What routing reads of the denied proposal (the agent's `Proposal` has the same)."""

    id: str
    call: ToolCall
    preview: Preview | None


def run_case(case: dict[str, Any], workspace: Path, settings: Settings) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="guard-safety-") as tmp:
        ws = Path(tmp) / "ws"
        shutil.copytree(workspace, ws)
        store = Store(Path(tmp) / "store.sqlite3")
        try:
            tools = ToolRunner(ws, settings)
            lanes = LanesFacade(store, settings, lambda text: max(1, len(text) // 4))
            denied = to_call(case["denied"])
            proposal = Proposal(f"p-{case['id']}", denied, tools.preview(denied))
            routed = lanes.route_correction(
                case["text"], proposal, is_denial=True, task_text=case.get("task")
            )
            items = store.lane_items()

            def verdict(spec: dict[str, Any]) -> dict[str, Any]:
                call = to_call(spec)
                v = lanes.check_guards(call, tools.preview(call))
                return {"call": spec, "action": v.action, "guard": v.guard_id}

            allowed = [verdict(c) for c in case["must_allow"]]
            blocked = [verdict(c) for c in case.get("must_block", [])]
        finally:
            store.close()
    task_scoped = any(it.get("kind") == TASK_KIND for it in items)
    guards = [it for it in items if it["lane"] == "CODE" and (it["spec"] or {}).get("rules")]
    return {
        "id": case["id"],
        "kind": case["kind"],
        "text": case["text"],
        "routed": None if routed is None else routed.lane,
        "task_scoped": task_scoped,
        "guards": [g["reason"] for g in guards],
        "must_allow": allowed,
        "must_block": blocked,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=Path, default=DATA / "cases.json")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/guard_safety.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores visible)", flush=True)
    cases = json.loads(args.cases.read_text())["cases"]
    settings = Settings(allocator="offline")
    started = time.monotonic()
    results = [run_case(c, DATA / "workspace", settings) for c in cases]
    elapsed = time.monotonic() - started

    allow = [(r, a) for r in results for a in r["must_allow"]]
    block = [(r, b) for r in results for b in r["must_block"]]
    false_blocks = [(r, a) for r, a in allow if a["action"] == "block"]
    rewritten = [(r, a) for r, a in allow if a["action"] == "rewrite"]
    caught = [(r, b) for r, b in block if b["action"] in ("block", "rewrite")]
    missed = [(r, b) for r, b in block if b["action"] == "allow"]
    task = [r for r in results if r["kind"] == "task"]
    standing = [r for r in results if r["kind"] == "standing"]
    summary = {
        "cases": len(results),
        "false_blocks": len(false_blocks),
        "must_allow": len(allow),
        "violations_blocked": round(len(caught) / len(block), 4) if block else None,
        "must_block": len(block),
        "must_allow_rewritten": len(rewritten),
        "task_cases": len(task),
        "task_cases_task_scoped": sum(r["task_scoped"] for r in task),
        "standing_cases": len(standing),
        "standing_cases_task_scoped": sum(r["task_scoped"] for r in standing),
        "standing_cases_with_guard": sum(bool(r["guards"]) for r in standing),
        "cpu": cpu_model(),
        "seconds": round(elapsed, 1),
    }
    print(
        f"{summary['cases']} cases ({len(task)} task-scoped by the writer, {len(standing)} "
        f"standing); {elapsed:.0f} s"
    )
    print(
        f"must-allow calls blocked: {len(false_blocks)} / {len(allow)}"
        f" (rewritten: {len(rewritten)})"
    )
    print(f"must-block calls blocked or rewritten: {len(caught)} / {len(block)}")
    print(
        f"task cases read as task-scoped: {summary['task_cases_task_scoped']} / {len(task)};"
        f" standing cases read as task-scoped: {summary['standing_cases_task_scoped']}"
        f" / {len(standing)}; standing cases with a guard:"
        f" {summary['standing_cases_with_guard']} / {len(standing)}"
    )
    for label, rows in (("FALSE BLOCK", false_blocks), ("MISSED", missed)):
        for r, c in rows:
            print(f"  {label} [{r['id']}] {r['text']!r}: {json.dumps(c['call'])[:140]}")
            for g in r["guards"]:
                print(f"      guard: {g[:200]}")
    for r in task:
        if not r["task_scoped"]:
            print(f"  not task-scoped [{r['id']}] {r['text']!r} -> {r['routed']}")
    for r in standing:
        if r["task_scoped"]:
            print(f"  task-scoped standing rule [{r['id']}] {r['text']!r}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**summary, "details": results}, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
