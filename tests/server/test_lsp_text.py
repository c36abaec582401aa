"""Unit tests of the server's pure helpers: minimal edits, edited-call conversion."""

from __future__ import annotations

import pytest

from continual_lsp.server.edits import (
    EditError,
    edited_command_arguments,
    edited_file_arguments,
    edited_json_arguments,
)
from continual_lsp.server.lsp_text import end_position, line_edit, proposal_message, split_lines
from continual_lsp.server.reviewer_files import strip_correction
from continual_lsp.tools.text_edits import apply_edit, apply_edit_lines

OLD = "a\nb\nc\nd\n"


def test_split_lines_counts_like_lsp() -> None:
    assert split_lines("a\r\nb\rc\nd") == ["a\r\n", "b\r", "c\n", "d"]
    assert split_lines("x\x0cy\n") == ["x\x0cy\n"]  # form feed is not a line break
    assert split_lines("") == []


def test_line_edit_is_minimal() -> None:
    change = line_edit(OLD, "a\nB\nc\nd\n")
    assert (change.start, change.old_end, change.new_end, change.text) == (1, 2, 2, "B\n")
    insert = line_edit(OLD, "a\nb\nnew\nc\nd\n")
    assert (insert.start, insert.old_end, insert.text) == (2, 2, "new\n")
    assert end_position("a\nb") == (1, 1)
    assert end_position("a\nb\n") == (2, 0)


@pytest.mark.parametrize(
    "edited",
    ["a\nB\nc\nd\n", "a\nb\nnew\nc\nd\n", "a\nb\nc\nd\ne\n", "z\na\nb\nc\nd\n", "a\nd\n"],
)
def test_edit_lines_round_trip(edited: str) -> None:
    args = edited_file_arguments("edit_lines", {"path": "f"}, OLD, edited)
    assert "tool" not in args  # stays the proposal's own tool
    assert apply_edit_lines(OLD, args["start"], args["end"], args["content"], "f") == edited


@pytest.mark.parametrize("edited", ["a\nB\nc\nd\n", "a\nb\nc\nd\ne\n", "x\nb\nc\nd\n"])
def test_edit_round_trip(edited: str) -> None:
    args = edited_file_arguments("edit", {"path": "f", "old": "a", "new": "b"}, OLD, edited)
    assert "tool" not in args
    new_text, _ = apply_edit(OLD, args["old"], args["new"], False, "f")
    assert new_text == edited


def test_edit_of_repeated_text_widens_until_unique() -> None:
    old = "x\nx\ny\n"
    args = edited_file_arguments("edit", {"path": "f"}, old, "x\nx\nz\n")
    assert old.count(args["old"]) == 1
    assert apply_edit(old, args["old"], args["new"], False, "f")[0] == "x\nx\nz\n"


def test_new_file_and_write_become_write() -> None:
    assert edited_file_arguments("write", {"path": "f"}, "a\n", "b\n") == {
        "path": "f",
        "content": "b\n",
    }
    assert edited_file_arguments("edit_lines", {"path": "f"}, None, "b\n")["tool"] == "write"


def test_unusable_edits_are_refused_with_a_reason() -> None:
    with pytest.raises(EditError, match="identical"):
        edited_file_arguments("edit_lines", {"path": "f"}, OLD, OLD)
    with pytest.raises(EditError, match="empty"):
        edited_command_arguments({"cmd": "ls"}, "  \n")
    assert edited_command_arguments({"cmd": "ls", "timeout": 5}, "ls -la\n") == {
        "cmd": "ls -la",
        "timeout": 5,
    }
    with pytest.raises(EditError, match="JSON"):
        edited_json_arguments({"pat": "x"}, "{nope")


def test_correction_file_comment_is_stripped() -> None:
    text = "<!-- continual: write below\n  more -->\n\nUse edit_lines.\n"
    assert strip_correction(text) == "Use edit_lines."
    assert strip_correction("<!-- only the header -->\n\n") == ""


def test_proposal_message() -> None:
    message = proposal_message(
        "edit_lines", {"path": "src/a.py", "start": 6, "end": 7, "content": "x\n"}
    )
    assert message == "Proposed edit_lines: replace lines 6-7 of src/a.py with 1 line"


def test_the_done_summary_is_the_whole_message() -> None:
    summary = "mean() divides with / now; " + "x" * 270
    assert len(summary) < 300
    assert proposal_message("done", {"summary": summary}) == (
        f"Proposed done: finish the task: {summary}"
    )


def test_a_path_in_a_message_is_shown_escaped() -> None:
    """Issue 32 finding 8: a bidi override in a path must not reorder what the reviewer reads."""
    message = proposal_message("write", {"path": "src/a\u202etxt.exe", "content": "x\n"})
    assert message == "Proposed write: write src/a\\u202etxt.exe (1 line)"
    grep = proposal_message("grep", {"pat": "x", "path": "p\u0430y"})
    assert grep.endswith("in p\\u0430y")
