"""`decide.resolve_hunks`: a hunk-by-hunk verdict read as one decision (pure)."""

from __future__ import annotations

import pytest

from continual_lsp.agent.decide import resolve_hunks
from continual_lsp.agent.errors import AgentError
from continual_lsp.agent.proposal import Proposal
from continual_lsp.protocol import HunkDecision
from continual_lsp.tools.base import Preview, ToolCall

OLD = "a\nb\nc\nd\ne\n"
NEW = "a\nB\nc\nd\nE\n"


def _proposal(old: str | None = OLD) -> Proposal:
    call = ToolCall(tool="write", arguments={"path": "notes.txt", "content": NEW})
    preview = Preview(path="notes.txt", old_content=old, new_content=NEW, diff="", old_sha256=None)
    return Proposal(id="p1", task_id="t1", call=call, read_only=False, preview=preview)


def test_every_hunk_accepted_is_an_approve() -> None:
    verdicts = [HunkDecision(index=0, accept=True), HunkDecision(index=1, accept=True)]
    assert resolve_hunks(_proposal(), verdicts) == ("approve", None, None)


def test_no_hunk_accepted_is_a_deny_with_each_reason_after_the_correction() -> None:
    verdicts = [
        HunkDecision(index=0, accept=False, reason="keep b"),
        HunkDecision(index=1, accept=False),
    ]
    decision, correction, edited = resolve_hunks(_proposal(), verdicts, "  lowercase only ")
    assert (decision, correction, edited) == ("deny", "lowercase only; hunk 1: keep b", None)


def test_some_hunks_accepted_is_an_edit_holding_them() -> None:
    verdicts = [
        HunkDecision(index=0, accept=True),
        HunkDecision(index=1, accept=False, reason="Keep e lowercase."),
    ]
    decision, correction, edited = resolve_hunks(_proposal(), verdicts)
    assert decision == "edit" and correction == "hunk 2: Keep e lowercase."
    assert edited is not None and edited["tool"] in ("write", "edit", "edit_lines")


def test_each_hunk_is_decided_exactly_once_and_only_a_change_has_hunks() -> None:
    with pytest.raises(AgentError, match="decide each exactly once"):
        resolve_hunks(_proposal(), [HunkDecision(index=0, accept=True)])
    with pytest.raises(AgentError, match="decide it whole"):
        resolve_hunks(_proposal(old=None), [HunkDecision(index=0, accept=True)])
