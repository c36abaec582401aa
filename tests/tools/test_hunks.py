"""Hunks of a file change and the change that keeps only some of them (issue 19)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from continual_lsp.tools.base import ToolError
from continual_lsp.tools.hunks import merge, partial_call, spans
from continual_lsp.tools.text_edits import apply_edit_lines

OLD = "a\nb\nc\nd\ne\nf\ng\n"
NEW = "a\nB\nc\nd\ne\nF\ng\nh\n"


def test_each_run_of_changed_lines_is_one_hunk() -> None:
    assert [(s.old_start, s.old_end, s.new_start, s.new_end) for s in spans(OLD, NEW)] == [
        (1, 2, 1, 2),
        (5, 6, 5, 6),
        (7, 7, 7, 8),
    ]


def test_merge_keeps_exactly_the_accepted_hunks() -> None:
    assert merge(OLD, NEW, [0]) == "a\nB\nc\nd\ne\nf\ng\n"
    assert merge(OLD, NEW, [1, 2]) == "a\nb\nc\nd\ne\nF\ng\nh\n"
    assert merge(OLD, NEW, []) == OLD
    with pytest.raises(ToolError, match="no hunk 3"):
        merge(OLD, NEW, [3])


def test_a_small_file_is_written_whole() -> None:
    call = partial_call("f.txt", OLD, NEW, [0])
    assert call.tool == "write" and call.arguments["content"] == merge(OLD, NEW, [0])


lines = st.lists(st.sampled_from(["x\n", "y\n", "z\n", "w\n", "v\n"]), max_size=12)


@given(lines, lines, st.data())
def test_edit_lines_form_equals_the_merge(
    old: list[str], new: list[str], data: st.DataObject
) -> None:
    big = "q" * 4000 + "\n"  # past one call's content: the edit_lines form
    o, n = big + "".join(old), big + "".join(new)
    total = len(spans(o, n))
    if total == 0:
        return
    keep = data.draw(st.lists(st.integers(0, total - 1), min_size=1, unique=True))
    call = partial_call("f", o, n, keep)
    assert call.tool == "edit_lines"
    a = call.arguments
    assert apply_edit_lines(o, a["start"], a["end"], a["content"], "f") == merge(o, n, keep)
