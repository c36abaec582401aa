"""Task-scoped corrections (DESIGN §5 "Before the lanes"): read, stored, promoted."""

from __future__ import annotations

import pytest

from continual_lsp.config import Settings
from continual_lsp.lanes.context import bullets_for_turn
from continual_lsp.lanes.guards.guard_set import check_guards
from continual_lsp.lanes.reading import Situation, read
from continual_lsp.lanes.routing.allocator import route_correction
from continual_lsp.lanes.routing_ledger import LedgerError, build_ledger, promote
from continual_lsp.lanes.scope import TASK_KIND, task_scope
from continual_lsp.tools.base import ToolCall

EMACS = "Change only the line with the bug in calc.py; use edit_lines, do not rewrite the file."


@pytest.mark.parametrize(
    "text",
    [
        EMACS,
        "That is not the bug.",
        "this line is fine, the problem is in the loop below",
        "Wrong file - the parser lives in src/parse.py",
        "Just fix the off-by-one, nothing else.",
        "For this fix, keep the function signature as it is.",
        "You rewrote the whole module; I only wanted the return value changed.",
        "Revert that, the import was correct.",
        "No, the bug is on line 12 where the range stops at n.",
        "Only change the comparison operator.",
        "not what I asked: the task was to rename the variable",
        "Leave the docstring alone in this edit.",
        "Use edit_lines for this one.",
        "The failing test is test_total, look there.",
        "That wasn't the slow part; the query in load_users is.",
        "Change it back to a list, a tuple breaks the callers.",
        "Not like this - add a parameter with a default.",
        "Here you want the async version.",
        "The regex is correct, leave it and fix the caller.",
        "That query is what times out.",
    ],
)
def test_corrections_about_this_change_are_task_scoped(text: str) -> None:
    scope = task_scope(read(text))
    assert scope.task_scoped, scope
    assert scope.cues and scope.reason().startswith("Task-scoped")


@pytest.mark.parametrize(
    "text",
    [
        "never edit files in migrations",
        "always use pnpm",
        "don't use print for debugging",
        "Never modify an existing migration in db/migrations; add a new migration instead.",
        "src/api/client.ts is generated; don't edit it by hand, run `pnpm gen`",
        "In this repo we use tabs, not spaces.",
        "Prefer edit_lines over rewriting whole files.",
        "Run the tests before every commit.",
        "Stop adding type: ignore comments.",
        "Use edit_lines instead of rewriting the whole file with write.",  # one weak cue
        "Use pnpm here, not npm.",
        "Always write a test that reproduces the bug first.",  # "the bug" under "always"
        "Never touch this file again.",
        "Wrong file: never edit vendor/lib.py, patch it in src/ instead.",
        "The default is fine for most projects; only change it when asked.",
        "Here we use tabs.",
        "This project uses pnpm.",
    ],
)
def test_standing_rules_are_not_task_scoped(text: str) -> None:
    assert not task_scope(read(text)).task_scoped, task_scope(read(text))


def _situation(path: str = "calc.py") -> Situation:
    return Situation(
        proposal_id="p1",
        task_text="Fix the off-by-one bug in calc.py so total(n) includes n.",
        tool="write",
        arguments={"path": path, "content": "def total(n):\n    return n\n"},
        path=path,
    )


def test_task_scoped_denial_makes_no_guard_and_no_bullet(store) -> None:
    item = route_correction(store, EMACS, _situation(), Settings(), denial=True, source="p1")
    assert item is not None
    assert item.lane == "NONE" and item.kind == TASK_KIND and item.cluster_id is None
    assert item.reason.startswith("Task-scoped")
    assert item.spec["task"]["context"]["path"] == "calc.py"
    assert "arguments" not in item.spec["task"]["context"]  # a write's content is not kept
    # Before: `keep \S in calc.py` blocked the one-line fix the reviewer asked for.
    fix = ToolCall(
        tool="edit_lines",
        arguments={"path": "calc.py", "start": 2, "end": 2, "content": "    return n + 1"},
    )
    assert check_guards(store, fix).action == "allow"
    assert bullets_for_turn(store, "Fix calc.py", [], ["calc.py"], count=False) == []
    ledger = build_ledger(store).items
    assert [(i.lane, i.active, i.reason[:11]) for i in ledger] == [("NONE", True, "Task-scoped")]
    assert store.events(kind="task_scoped")


def test_a_note_without_a_proposal_is_never_task_scoped(store, embedder) -> None:
    item = route_correction(
        store, "Only change the comparison operator.", None, Settings(), denial=True,
        embedder=embedder,
    )  # fmt: skip
    assert item is not None and item.kind != TASK_KIND


def test_promote_routes_the_text_again_as_a_standing_rule(store, embedder) -> None:
    denied = Situation(tool="bash", arguments={"cmd": "npm install left-pad"})
    item = route_correction(store, "Just use pnpm for this one.", denied, denial=True)
    assert item is not None and item.kind == TASK_KIND
    assert item.spec["task"]["context"]["arguments"] == {"cmd": "npm install left-pad"}
    assert check_guards(store, ToolCall(tool="bash", arguments=denied.arguments)).action == "allow"
    promoted = promote(store, item.id, Settings())
    # The stored call lets the promoted text compile as it would have: npm -> pnpm.
    assert promoted.lane == "CODE" and promoted.kind != TASK_KIND
    verdict = check_guards(store, ToolCall(tool="bash", arguments={"cmd": "npm test"}))
    assert verdict.action == "rewrite" and verdict.rewritten_call is not None
    assert verdict.rewritten_call.arguments["cmd"] == "pnpm test"
    row = store.lane_item(item.id)
    assert row is not None and not row["active"]
    assert row["spec"]["task"]["promoted_to"] == promoted.id
    assert "Promoted by the reviewer" in row["reason"]
    with pytest.raises(LedgerError):
        promote(store, item.id)  # already promoted
    with pytest.raises(LedgerError):
        promote(store, promoted.id)  # not task-scoped


def test_standing_rules_of_the_dev_set_stay_standing() -> None:
    """Said in a denial, a rules-file line must keep its lane: at most 1 % of the dev set's
    rules read as task-scoped (1 of 379 at this writing: "see the top of this file")."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench/data/rules-dev.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rules = [r["text"] for r in rows if r["lane"] != "NONE"]
    scoped = [t for t in rules if task_scope(read(t)).task_scoped]
    assert len(rules) > 300 and len(scoped) <= len(rules) // 100, scoped
