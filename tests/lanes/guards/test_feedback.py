"""An override counts against a guard (twice retires it to CONTEXT); a guard compiled from
a denial lets the reviewer's own fix through (narrowed, or dropped to CONTEXT)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from continual_lsp.config import Settings
from continual_lsp.lanes import routing_ledger
from continual_lsp.lanes.guards import feedback, guard_set
from continual_lsp.tools.base import ToolCall
from continual_lsp.tools.runner import ToolRunner

KEEP_CALC = {"kind": "keep", "pattern": r"\S", "path_globs": ["calc.py"]}
NO_WRITE = {"kind": "tool", "deny": ["write"]}
CALC = "def total(n):\n    s = 0\n    for i in range(1, n):\n        s += i\n    return s\n"
FIX = ToolCall(
    tool="edit_lines",
    arguments={
        "path": "calc.py",
        "start": 3,
        "end": 3,
        "content": "    for i in range(1, n + 1):\n",
    },
)


def _guard(store: Any, rules: list[dict[str, Any]], message: str = "Keep calc.py.") -> str:
    return store.add_lane_item(
        {
            "text": message,
            "lane": "CODE",
            "reason": "compiled",
            "cue": {},
            "spec": {"message": message, "rules": rules},
        }
    )


def _item(store: Any, item_id: str) -> Any:
    [item] = [i for i in routing_ledger.build_ledger(store).items if i.id == item_id]
    return item


def test_a_guard_overridden_twice_retires_to_context(store: Any) -> None:
    guard_id = _guard(store, [{"kind": "command", "pattern": "^npm "}], "Use pnpm.")
    assert _item(store, guard_id).overridden == 0  # a guard shows its count from the start
    assert feedback.record_override(store, guard_id, "p1") is None
    assert (_item(store, guard_id).lane, _item(store, guard_id).overridden) == ("CODE", 1)
    npm = ToolCall(tool="bash", arguments={"cmd": "npm install"})
    assert guard_set.check_guards(store, npm).action == "block"
    retired = feedback.record_override(store, guard_id, "p2")
    assert retired is not None and retired.lane == "CONTEXT"
    assert "overrode this guard 2 times" in retired.reason
    item = _item(store, guard_id)
    assert (item.lane, item.active, item.overridden) == ("CONTEXT", True, 2)
    assert item.reason == retired.reason
    # No longer a block: the call runs past the guards.
    assert guard_set.check_guards(store, npm).action == "allow"
    assert [e["payload"]["count"] for e in store.events("guard_overridden")] == [1, 2]


def _preview(tmp_path: Path, call: ToolCall) -> Any:
    (tmp_path / "calc.py").write_text(CALC)
    return ToolRunner(tmp_path, Settings()).preview(call)


def test_a_guard_that_blocks_the_reviewers_fix_is_dropped_to_context(
    store: Any, tmp_path: Path
) -> None:
    guard_id = _guard(store, [KEEP_CALC])
    preview = _preview(tmp_path, FIX)
    assert guard_set.check_guards(store, FIX, preview).action == "block"  # the bug of issue 31
    [change] = feedback.let_through(store, [guard_id], FIX, preview, what="edit_lines calc.py")
    assert change.lane == "CONTEXT" and change.item_id == guard_id
    assert "would block the call the reviewer accepted in this task (edit_lines calc.py)" in (
        change.reason
    )
    assert _item(store, guard_id).lane == "CONTEXT"
    assert _item(store, guard_id).reason == change.reason
    assert guard_set.check_guards(store, FIX, preview).action == "allow"


def test_a_guard_is_narrowed_to_the_rules_that_let_the_fix_through(
    store: Any, tmp_path: Path
) -> None:
    guard_id = _guard(store, [KEEP_CALC, NO_WRITE], "Change only the line; never write.")
    preview = _preview(tmp_path, FIX)
    [change] = feedback.let_through(store, [guard_id], FIX, preview)
    assert change.lane == "CODE" and change.reason.startswith("Narrowed:")
    assert "tool deny write" in change.reason
    [kept] = store.lane_item(guard_id)["spec"]["rules"]
    assert (kept["kind"], kept["deny"]) == ("tool", ["write"])
    assert guard_set.check_guards(store, FIX, preview).action == "allow"
    # What the narrowed guard keeps still blocks.
    rewrite = ToolCall(tool="write", arguments={"path": "calc.py", "content": "x = 1\n"})
    assert guard_set.check_guards(store, rewrite, None).action == "block"


def test_only_the_tasks_guards_and_only_when_they_block(store: Any, tmp_path: Path) -> None:
    standing = _guard(store, [KEEP_CALC])
    other = _guard(store, [{"kind": "command", "pattern": "^npm "}])
    preview = _preview(tmp_path, FIX)
    # A standing guard not named is left alone; a named one that lets the call pass too.
    assert feedback.let_through(store, [other], FIX, preview) == []
    assert store.lane_item(standing)["lane"] == "CODE"
    assert store.lane_item(other)["spec"]["rules"] == [{"kind": "command", "pattern": "^npm "}]
