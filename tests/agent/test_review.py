"""Issue 19 on the Agent: hunk-by-hunk decisions, undo, allow rules, autonomy and the
ledger's evidence. The real embedded model scores scripted calls (teacher forcing, as in
the protocol tests); the store, tools, sandbox and lanes are real."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from continual_lsp.agent.agent import Agent
from continual_lsp.agent.errors import AgentError
from continual_lsp.lanes.routing.embed import HashingEmbedder, set_embedder
from continual_lsp.protocol import HunkDecision
from tests.agent.support import make_agent
from tests.server.scripted import ForcedCallPolicy

pytestmark = pytest.mark.model

GIT_STATUS = {"tool": "bash", "arguments": {"cmd": "git status"}}
RM = {"tool": "bash", "arguments": {"cmd": "rm -rf build"}}
NOTES = "a\nb\nc\nd\ne\n"
# Read first (it runs unasked): a model's write that drops most of a file the task never
# read cannot run (`calls.clobbers`).
READ_NOTES = {"tool": "read", "arguments": {"path": "notes.txt"}}


def write(path: str, content: str) -> dict[str, Any]:
    return {"tool": "write", "arguments": {"path": path, "content": content}}


@pytest.fixture(autouse=True)
def lexical_clusters() -> Iterator[None]:
    set_embedder(HashingEmbedder())
    yield
    set_embedder(None)


@pytest.fixture
def queued() -> list[tuple[str, str, str | None]]:
    return []


def scripted(
    tmp_path: Path,
    workspace: Path,
    model_and_tokenizer: Any,
    queued: list[tuple[str, str, str | None]],
    calls: list[dict[str, Any]],
    **settings: Any,
) -> Agent:
    from continual_lsp.config import Settings

    policy = ForcedCallPolicy(Settings(enable_training=False), calls, model_and_tokenizer)
    agent = make_agent(tmp_path, workspace, policy, **settings)
    # Training is off in agent tests: what would be queued is recorded instead.
    agent.training.enqueue = lambda pid, signal, correction, *a, **k: queued.append(  # type: ignore[method-assign]
        (pid, signal, correction)
    )
    return agent


def test_one_hunk_accepted_one_rejected_is_an_edit_with_the_reason(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, queued: list[Any]
) -> None:
    (workspace / "notes.txt").write_text(NOTES)
    agent = scripted(
        tmp_path, workspace, model_and_tokenizer, queued, [write("notes.txt", "a\nB\nc\nd\nE\n")]
    )
    _, proposal = agent.start_task("capitalise b and e in notes.txt")
    assert proposal is not None
    hunks = proposal.hunks()
    assert [(h.old_start, h.old_lines) for h in hunks] == [(2, 1), (5, 1)]
    with pytest.raises(AgentError, match="decide each exactly once"):
        agent.decide(proposal.id, "edit", hunks=[HunkDecision(index=0, accept=True)])
    agent.decide(
        proposal.id,
        "edit",
        hunks=[
            HunkDecision(index=0, accept=True),
            HunkDecision(index=1, accept=False, reason="Keep e lowercase."),
        ],
    )
    assert (workspace / "notes.txt").read_text() == "a\nB\nc\nd\ne\n"
    decision = agent.store.decision(proposal.id)
    assert decision is not None and decision["decision"] == "edit"
    assert decision["correction"] == "hunk 2: Keep e lowercase."
    assert decision["edited_arguments"]["content"] == "a\nB\nc\nd\ne\n"
    assert (proposal.id, "edit", "hunk 2: Keep e lowercase.") in queued
    agent.close()


def test_undo_restores_the_file_and_is_a_late_denial(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, queued: list[Any]
) -> None:
    (workspace / "notes.txt").write_text(NOTES)
    agent = scripted(
        tmp_path,
        workspace,
        model_and_tokenizer,
        queued,
        [READ_NOTES, write("notes.txt", "replaced\n"), write("new.txt", "fresh\n"), GIT_STATUS],
    )
    _, first = agent.start_task("rewrite notes.txt")
    assert first is not None
    second = agent.decide(first.id, "approve").next_proposal
    assert second is not None
    agent.decide(second.id, "approve")
    assert (workspace / "new.txt").exists()
    # The latest change first: the file it created goes away.
    assert agent.undo().restored == ["new.txt"]
    assert not (workspace / "new.txt").exists()
    result = agent.undo(first.id, reason="Never replace notes.txt wholesale.")
    assert result.restored == ["notes.txt"]
    assert (workspace / "notes.txt").read_text() == NOTES
    assert (first.id, "deny", "Never replace notes.txt wholesale.") in queued
    assert agent.store.proposal(first.id)["status"] == "undone"
    assert any(i.text.startswith("Never replace") for i in agent.ledger().items)
    with pytest.raises(AgentError, match="already undone"):
        agent.undo(first.id)
    agent.close()


def test_undo_after_the_file_changed_is_refused_and_nothing_is_lost(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, queued: list[Any]
) -> None:
    (workspace / "notes.txt").write_text(NOTES)
    agent = scripted(
        tmp_path,
        workspace,
        model_and_tokenizer,
        queued,
        [READ_NOTES, write("notes.txt", "replaced\n")],
    )
    _, first = agent.start_task("rewrite notes.txt")
    assert first is not None
    agent.decide(first.id, "approve")
    (workspace / "notes.txt").write_text("the reviewer's newer work\n")
    with pytest.raises(AgentError, match=r"notes\.txt changed since"):
        agent.undo(first.id)
    assert (workspace / "notes.txt").read_text() == "the reviewer's newer work\n"
    assert not queued
    agent.close()


def test_a_bash_call_is_undone_from_its_snapshot(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, queued: list[Any]
) -> None:
    (workspace / "notes.txt").write_text(NOTES)
    cmd = "echo made > out.txt && echo more >> notes.txt && rm src/calc/ops.py"
    original = (workspace / "src/calc/ops.py").read_text()
    agent = scripted(
        tmp_path,
        workspace,
        model_and_tokenizer,
        queued,
        [{"tool": "bash", "arguments": {"cmd": cmd}}],
    )
    _, first = agent.start_task("shuffle files")
    assert first is not None
    agent.decide(first.id, "approve")
    assert (workspace / "out.txt").exists() and not (workspace / "src/calc/ops.py").exists()
    result = agent.undo()
    assert result.restored == ["notes.txt", "out.txt", "src/calc/ops.py"]
    assert not (workspace / "out.txt").exists()
    assert (workspace / "notes.txt").read_text() == NOTES
    assert (workspace / "src/calc/ops.py").read_text() == original
    assert queued and queued[-1][1] == "deny"
    agent.close()


def test_always_allow_runs_the_next_identical_call_without_a_prompt(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, queued: list[Any]
) -> None:
    agent = scripted(
        tmp_path,
        workspace,
        model_and_tokenizer,
        queued,
        [GIT_STATUS, write("a.txt", "1\n"), GIT_STATUS, write("b.txt", "2\n"), GIT_STATUS,
         write("c.txt", "3\n"), RM, write("d.txt", "4\n")],
        allow_offer_after=1,
    )  # fmt: skip
    _, first = agent.start_task("check the tree")
    assert first is not None and first.allow_offer is None
    agent.decide(first.id, "approve")
    _, second = agent.start_task("check the tree again")
    assert second is not None and second.call.tool == "bash"
    assert second.allow_offer is not None and second.allow_offer.approvals == 1
    allowed = agent.allow(second.id)
    assert allowed.rule == "bash: `git status …`, no other options"
    agent.decide(second.id, "approve")
    _, third = agent.start_task("and again")
    # git status ran unasked; the task moved on to the write.
    assert third is not None and third.call.tool == "write"
    auto = agent.store.events(kind="auto_approved")
    assert [e["payload"]["why"] for e in auto] == [f"allow rule {allowed.item_id}"]
    item = next(i for i in agent.ledger().items if i.id == allowed.item_id)
    assert item.lane == "CODE" and item.fired == 1
    assert item.approvals == [first.id]  # the approvals before the reviewer asked
    with pytest.raises(AgentError, match="cannot be always allowed"):
        agent.allow(
            agent.store.add_proposal(
                third.task_id, 9, "bash", RM["arguments"], [1], [], [], None, None
            )
        )
    agent.close()


def test_a_guard_that_fires_three_times_shows_three_and_a_recurrence_shows_one(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, queued: list[Any]
) -> None:
    # Each task proposes rm -rf first, then (as the chosen retry) a write.
    script = []
    for n in range(5):
        script += [RM, write(f"f{n}.txt", f"{n}\n")]
    agent = scripted(tmp_path, workspace, model_and_tokenizer, queued, script)
    _, first = agent.start_task("clean up")
    assert first is not None
    agent.decide(first.id, "deny", correction="Never run rm -rf; delete the one file.")
    guard = next(i for i in agent.ledger().items if i.lane == "CODE")
    assert guard.fired == 0 and guard.recurred_after == 0
    # An allow rule for rm cannot exist, and a guard is consulted before any allow rule.
    with pytest.raises(AgentError, match="cannot be always allowed"):
        agent.allow(first.id)
    for n in range(3):
        _, retry = agent.start_task(f"clean up, take {n}")
        assert retry is not None and retry.call.tool == "write"  # rm -rf was blocked
    item = next(i for i in agent.ledger().items if i.id == guard.id)
    assert item.fired == 3 and item.recurred_after == 0
    # The mistake comes back in words after its lesson: one recurrence.
    _, last = agent.start_task("clean up for the last time")
    assert last is not None
    agent.decide(last.id, "deny", correction="Don't use rm -rf, remove single files.")
    item = next(i for i in agent.ledger().items if i.id == guard.id)
    assert item.fired == 4 and item.recurred_after == 1
    agent.close()
