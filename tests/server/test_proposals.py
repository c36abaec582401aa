"""A Proposal's wire payload (`proposals.notification`): document, lines, hunks."""

from __future__ import annotations

from pathlib import Path

from continual_lsp.agent.proposal import Proposal
from continual_lsp.tools.base import Preview, ToolCall
from server.proposals import notification


def _change(path: str, old: str, new: str, lines: tuple[int, int] | None) -> Proposal:
    call = ToolCall(tool="write", arguments={"path": path, "content": new})
    preview = Preview(
        path=path,
        old_content=old,
        new_content=new,
        diff="--- a\n+++ b\n",
        old_sha256=None,
        changed_lines=lines,
    )
    return Proposal(id="p1", task_id="t1", call=call, read_only=False, preview=preview)


def test_a_file_change_names_its_document_lines_and_hunks(tmp_path: Path) -> None:
    proposal = _change("notes.txt", "a\nb\nc\nd\ne\n", "a\nB\nc\nd\nE\n", (2, 5))
    proposal.blocked_by, proposal.checked = "no capitals", "parses"
    note = notification(proposal, tmp_path)
    assert note.uri == (tmp_path / "notes.txt").resolve().as_uri()
    assert note.range is not None and (note.range.start.line, note.range.end.line) == (1, 4)
    assert note.hunks is not None and [h.old_start for h in note.hunks] == [2, 5]
    assert note.diff == "--- a\n+++ b\n" and not note.read_only
    dumped = note.dump()
    assert dumped["blockedBy"] == "no capitals" and dumped["checked"] == "parses"


def test_one_hunk_is_decided_whole_and_an_escaping_path_has_no_document(tmp_path: Path) -> None:
    one = notification(_change("notes.txt", "a\n", "A\n", (1, 1)), tmp_path)
    assert one.hunks is None and one.uri is not None
    outside = notification(_change("../elsewhere.txt", "a\n", "A\n", None), tmp_path)
    assert outside.uri is None and outside.range is None


def test_a_call_without_a_file_has_neither_document_nor_diff(tmp_path: Path) -> None:
    done = Proposal(
        id="p2",
        task_id="t1",
        call=ToolCall(tool="done", arguments={"summary": "fixed"}),
        read_only=False,
    )
    note = notification(done, tmp_path)
    assert note.uri is None and note.diff is None and note.arguments == {"summary": "fixed"}
