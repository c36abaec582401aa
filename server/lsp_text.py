"""Pure text helpers: line splitting as LSP counts lines, minimal edits, short descriptions.

Nothing here touches pygls state, so it is unit-testable without a connection.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from continual_lsp.text import shown_path
from continual_lsp.text import unified_diff as shared_diff

# LSP ends a line at \r\n, \r or \n only; str.splitlines() also splits on \v, \f, \x1c…
# and would put positions on the wrong line for files that contain them.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> list[str]:
    """Lines with their endings; "" → []; a last line without a newline is kept."""
    return _LINE.findall(text)


@dataclass(frozen=True)
class LineEdit:
    """Replace old lines [start, old_end) with `text`; the new lines are [start, new_end)."""

    start: int
    old_end: int
    new_end: int
    text: str


def line_edit(old: str, new: str) -> LineEdit:
    """The smallest whole-line replacement that turns `old` into `new`.

    Whole lines (not characters) keep the edit readable in an editor's undo history and
    give the manual-edit tracker a line range to watch.
    """
    a, b = split_lines(old), split_lines(new)
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while (
        suffix < min(len(a), len(b)) - prefix and a[len(a) - 1 - suffix] == b[len(b) - 1 - suffix]
    ):
        suffix += 1
    return LineEdit(
        start=prefix,
        old_end=len(a) - suffix,
        new_end=len(b) - suffix,
        text="".join(b[prefix : len(b) - suffix]),
    )


def end_position(text: str, units: Callable[[str], int] = len) -> tuple[int, int]:
    """(line, character) just past the last character, in the client's units."""
    lines = split_lines(text)
    if not lines:
        return 0, 0
    last = lines[-1]
    if last.endswith(("\n", "\r")):
        return len(lines), 0
    return len(lines) - 1, units(last)


def line_position(text: str, line: int, units: Callable[[str], int] = len) -> tuple[int, int]:
    """Start of `line` in `text`, or the end of the text when `line` is past it."""
    if line < len(split_lines(text)):
        return line, 0
    return end_position(text, units)


def unified_diff(before: str, after: str, name: str, a_label: str, b_label: str) -> str:
    """The one diff (`continual_lsp.text`), labelled with where each side came from."""
    name = shown_path(name)
    return shared_diff(before, after, f"a/{name} ({a_label})", f"b/{name} ({b_label})")


def clip(text: str, limit: int = 60) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"


def describe_call(tool: str, arguments: dict[str, Any]) -> str:
    """One line a reviewer can read in a diagnostic or a message box."""
    path = shown_path(str(arguments.get("path", "")))
    if tool == "edit_lines":
        start, end = arguments.get("start"), arguments.get("end")
        span = f"line {start}" if start == end else f"lines {start}-{end}"
        count = len(split_lines(str(arguments.get("content", ""))))
        return f"replace {span} of {path} with {count} line{'s' * (count != 1)}"
    if tool == "edit":
        old, new = clip(str(arguments.get("old", "")), 30), clip(str(arguments.get("new", "")), 30)
        return f"in {path}, replace '{old}' with '{new}'"
    if tool == "write":
        count = len(split_lines(str(arguments.get("content", ""))))
        return f"write {path} ({count} line{'s' * (count != 1)})"
    if tool == "bash":
        return f"run `{clip(str(arguments.get('cmd', '')), 80)}`"
    if tool == "done":
        # The model's own summary, whole (at most 300 characters): it is the proposal.
        return f"finish the task: {clip(str(arguments.get('summary', '')), 300)}"
    if tool in ("glob", "grep"):
        where = f" in {shown_path(str(arguments['path']))}" if arguments.get("path") else ""
        return f"{tool} '{clip(str(arguments.get('pat', '')), 40)}'{where}"
    return f"{tool} {path}".strip()


def proposal_message(
    tool: str, arguments: dict[str, Any], note: str | None = None, blocked_by: str | None = None
) -> str:
    """`Proposed edit_lines: replace lines 6-7 of src/calc/ops.py with 1 line`; a call a
    guard blocks says so first (only Edit, Deny or Override guard can pass it)."""
    text = f"Proposed {tool}: {describe_call(tool, arguments)}"
    if blocked_by:
        text = f"Blocked by a guard ({blocked_by}): {text}"
    return f"{text} ({note})" if note else text
