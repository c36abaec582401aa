"""Issue 31 items 2-3, issue 30 item 4 on the Agent: a call a guard blocks is offered with
the guard's reason and override, never a plain Approve; override runs it and counts against
the guard (twice retires it); a guard compiled from this task's denial lets the reviewer's
own fix through. The real embedded model scores scripted calls (teacher forcing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from continual_lsp.agent.agent import Agent
from continual_lsp.agent.errors import AgentError
from continual_lsp.config import Settings
from continual_lsp.lanes.routing.embed import HashingEmbedder, set_embedder
from continual_lsp.protocol import RoutedNotification
from continual_lsp.tools.base import ToolCall
from tests.agent.support import record_jobs
from tests.server.scripted import FIX_MEAN, RUN_TESTS, WRONG_TEST, ForcedCallPolicy

pytestmark = pytest.mark.model

GUARD_TEXT = "Leave src/calc/ops.py alone."


class Routed:
    """A listener that keeps what the agent routes."""

    def __init__(self) -> None:
        self.routed: list[RoutedNotification] = []

    def on_routed(self, note: RoutedNotification) -> None:
        self.routed.append(note)

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


@pytest.fixture(autouse=True)
def lexical_clusters() -> Iterator[None]:
    set_embedder(HashingEmbedder())
    yield
    set_embedder(None)


def scripted(
    tmp_path: Path,
    workspace: Path,
    model_and_tokenizer: Any,
    calls: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Agent, Routed]:
    settings = Settings(enable_training=False, store_path=str(tmp_path / "store.sqlite3"))
    policy = ForcedCallPolicy(Settings(enable_training=False), calls, model_and_tokenizer)
    listener = Routed()
    agent = Agent(settings, workspace, policy=policy, listener=listener)  # type: ignore[arg-type]
    record_jobs(agent, monkeypatch)
    return agent, listener


def seed_guard(agent: Agent) -> str:
    return agent.store.add_lane_item(
        {
            "text": GUARD_TEXT,
            "lane": "CODE",
            "reason": "test",
            "cue": {},
            "spec": {"message": GUARD_TEXT, "rules": [{"kind": "path", "globs": ["src/calc/**"]}]},
        }
    )


def ledger_item(agent: Agent, item_id: str) -> Any:
    [item] = [i for i in agent.ledger().items if i.id == item_id]
    return item


def test_a_blocked_call_offers_override_not_approve_and_two_overrides_retire_the_guard(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every sample and retry candidate is the fix the guard blocks; then a bash call.
    calls = [FIX_MEAN, FIX_MEAN, RUN_TESTS, FIX_MEAN, FIX_MEAN, RUN_TESTS]
    agent, listener = scripted(tmp_path, workspace, model_and_tokenizer, calls, monkeypatch)
    guard_id = seed_guard(agent)
    _, shown = agent.start_task("Fix mean() in src/calc/ops.py")
    assert shown is not None and shown.call.model_dump() == FIX_MEAN
    assert shown.blocked_by == GUARD_TEXT
    assert shown.note is not None and "override the guard" in shown.note
    # Reloaded from the store (another connection, `continual/pending`): still blocked.
    assert [p.blocked_by for p in agent.pending_proposals()] == [GUARD_TEXT]
    with pytest.raises(AgentError, match='override the guard \\(decision "override"\\)'):
        agent.decide(shown.id, "approve")
    assert agent.proposal_status(shown.id) == "pending"
    outcome = agent.decide(shown.id, "override")
    assert outcome.result is not None and outcome.result.ok
    assert "sum(values) / len(values)" in (workspace / "src/calc/ops.py").read_text()
    assert agent.proposal_status(shown.id) == "override"
    item = ledger_item(agent, guard_id)
    assert (item.lane, item.overridden) == ("CODE", 1)
    assert listener.routed == []
    # The next call no guard blocks: approve, and override is refused.
    following = outcome.next_proposal
    assert following is not None and following.blocked_by is None
    with pytest.raises(AgentError, match="no guard blocks"):
        agent.decide(following.id, "override")
    # A second task, a second override: the guard retires to CONTEXT, and says why.
    (workspace / "src/calc/ops.py").write_text(
        "def add(a, b):\n    return a + b\n\n\ndef mean(values):\n    # BUG\n"
        "    return sum(values) // len(values)\n"
    )
    _, again = agent.start_task("Fix mean() in src/calc/ops.py again")
    assert again is not None and again.blocked_by == GUARD_TEXT
    agent.decide(again.id, "override")
    item = ledger_item(agent, guard_id)
    assert (item.lane, item.overridden, item.active) == ("CONTEXT", 2, True)
    assert [(r.item_id, r.lane) for r in listener.routed] == [(guard_id, "CONTEXT")]
    assert "overrode this guard 2 times" in listener.routed[0].reason
    agent.close()


def test_a_guard_from_this_tasks_denial_is_narrowed_when_the_reviewers_edit_needs_it(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The model only ever changes the test; the reviewer says which tool not to use, and
    # then edits the call into the fix, with that very tool.
    agent, listener = scripted(tmp_path, workspace, model_and_tokenizer, [WRONG_TEST], monkeypatch)
    _, proposal = agent.start_task("Fix mean() in src/calc/ops.py")
    assert proposal is not None
    rule = "Never use the edit_lines tool; no `print(` either."
    outcome = agent.decide(proposal.id, "deny", correction=rule)
    [routed] = listener.routed
    assert routed.lane == "CODE"  # compiled into a guard: no edit_lines, anywhere
    offer = outcome.next_proposal
    # Every retry candidate is edit_lines: the denied call comes back, blocked by the guard.
    assert offer is not None and offer.blocked_by == rule
    agent.decide(offer.id, "edit", edited_arguments={"tool": "edit_lines", **FIX_MEAN["arguments"]})
    assert "sum(values) / len(values)" in (workspace / "src/calc/ops.py").read_text()
    # Its tool rule would block the reviewer's own fix: narrowed to what lets the fix
    # through (no `print(` in added text), and the ledger says why.
    change = listener.routed[-1]
    assert (change.item_id, change.lane) == (routed.item_id, "CODE")
    item = ledger_item(agent, routed.item_id)
    assert item.reason == change.reason and item.reason.startswith("Narrowed: tool deny edit_lines")
    assert "would block the call the reviewer accepted in this task (edit_lines" in item.reason
    assert [r["kind"] for r in agent.store.lane_item(item.id)["spec"]["rules"]] == ["content"]
    fix = ToolCall.model_validate(FIX_MEAN)
    assert agent.lanes.check_guards(fix, None).action == "allow"
    agent.close()


def test_a_task_scoped_correction_lets_the_fix_through_and_can_be_promoted(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 31's Emacs case: a whole-file rewrite denied with a correction about this change.
    ops = (workspace / "src/calc/ops.py").read_text()
    rewrite = {
        "tool": "write",
        "arguments": {"path": "src/calc/ops.py", "content": ops.replace("//", "/") + "\n# ok\n"},
    }
    calls = [rewrite, FIX_MEAN, RUN_TESTS]
    agent, listener = scripted(tmp_path, workspace, model_and_tokenizer, calls, monkeypatch)
    _, proposal = agent.start_task("Fix the bug in mean() in src/calc/ops.py")
    assert proposal is not None and proposal.call.tool == "write"
    correction = (
        "Change only the line with the bug in ops.py; use edit_lines, do not rewrite the file."
    )
    retry = agent.decide(proposal.id, "deny", correction=correction).next_proposal
    # Kept with the task: no guard, so the one-line fix is the retry, approvable.
    assert retry is not None and retry.call.model_dump() == FIX_MEAN
    assert retry.blocked_by is None
    [item] = [i for i in agent.ledger().items if i.text == correction]
    assert (item.lane, item.task_scoped) == ("NONE", True)
    assert listener.routed == []
    agent.decide(retry.id, "approve")
    # The reviewer keeps it after all: routed again as a standing rule.
    promoted = agent.promote(item.id)
    assert promoted.item_id != item.id and listener.routed[-1].item_id == promoted.item_id
    assert not ledger_item(agent, item.id).active
    with pytest.raises(AgentError, match="already promoted"):
        agent.promote(item.id)
    agent.close()
