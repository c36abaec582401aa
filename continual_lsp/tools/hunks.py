"""A file change cut into hunks, and the change that keeps only some of them.

A hunk is one run of changed lines (no context merges two runs), so each can be accepted
or rejected on its own and the numbering is the same for every client.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from continual_lsp.text import split_lines
from continual_lsp.tools.base import ToolCall, ToolError, WriteArgs


@dataclass(frozen=True)
class Span:
    """Lines [old_start, old_end) of the old text become [new_start, new_end) of the new
    (0-based, end exclusive)."""

    old_start: int
    old_end: int
    new_start: int
    new_end: int


def spans(old: str | None, new: str) -> list[Span]:
    """The hunks of `old` → `new`, in order."""
    matcher = difflib.SequenceMatcher(None, split_lines(old or ""), split_lines(new), False)
    return [Span(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def merge(old: str | None, new: str, accepted: Iterable[int]) -> str:
    """`old` with only the `accepted` hunks of `old` → `new` applied."""
    keep = set(accepted)
    all_spans = spans(old, new)
    unknown = sorted(keep - set(range(len(all_spans))))
    if unknown:
        raise ToolError(
            f"no hunk {unknown[0]}: this change has {len(all_spans)} hunk(s), numbered from 0"
        )
    old_lines, new_lines = split_lines(old or ""), split_lines(new)
    out: list[str] = []
    at = 0
    for index, span in enumerate(all_spans):
        out.extend(old_lines[at : span.old_start])
        chosen = new_lines[span.new_start : span.new_end]
        out.extend(chosen if index in keep else old_lines[span.old_start : span.old_end])
        at = span.old_end
    out.extend(old_lines[at:])
    return "".join(out)


def partial_call(path: str, old: str | None, new: str, accepted: Iterable[int]) -> ToolCall:
    """The call that makes `path` hold `old` with the `accepted` hunks: a `write` of the
    merged file when it fits one call, else an `edit_lines` over the lines from the first
    accepted hunk to the last."""
    keep = sorted(set(accepted))
    merged = merge(old, new, keep)
    limit = WriteArgs.model_fields["content"].metadata[0].max_length
    if old is None or len(merged) <= limit:
        return ToolCall(tool="write", arguments={"path": path, "content": merged})
    all_spans = spans(old, new)
    start, end = all_spans[keep[0]].old_start, all_spans[keep[-1]].old_end
    if start == end == 0:
        end = 1  # edit_lines cannot insert before line 1: take line 1 along
    merged_lines = split_lines(merged)
    content = "".join(merged_lines[start : end + len(merged_lines) - len(split_lines(old))])
    if len(content) > limit:
        raise ToolError(
            f"the accepted hunks of {path} span {len(content)} characters, more than one "
            f"call carries ({limit}); accept or reject fewer lines at a time"
        )
    # end == start - 1 (a pure insertion) inserts before line start + 1.
    return ToolCall(
        tool="edit_lines",
        arguments={"path": path, "start": start + 1, "end": end, "content": content},
    )
