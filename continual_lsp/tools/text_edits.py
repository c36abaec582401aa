"""Pure text transforms behind write / edit / edit_lines, and the unified diff of a change.

Nothing here touches the disk: the runner reads the current bytes, these functions
compute the new text, and the runner writes it once the reviewer approves.
"""

from __future__ import annotations

import difflib

from continual_lsp.text import shown_path, split_lines, unified_diff
from continual_lsp.tools.base import OldTextNotFound, RangePastEnd, ToolError

__all__ = [
    "apply_edit",
    "apply_edit_lines",
    "changed_range",
    "file_diff",
]


def _newline(text: str) -> str:
    first = text.find("\n")
    return "\r\n" if first > 0 and text[first - 1] == "\r" else "\n"


def _to_newline(text: str, nl: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", nl) if nl != "\n" else text


def apply_edit(text: str, old: str, new: str, replace_all: bool, rel: str) -> tuple[str, int]:
    """Replace `old` by `new` in `text`; returns (new text, number of replacements).

    `old` must occur exactly once unless `replace_all`. In a CRLF file, an `old` and
    `new` written with plain `\\n` are matched and inserted with CRLF.
    """
    if old == new:
        raise ToolError(f"edit {rel}: `old` and `new` are identical; nothing would change")
    count = text.count(old)
    if count == 0 and "\n" in old and "\r\n" not in old and _newline(text) == "\r\n":
        crlf_old = _to_newline(old, "\r\n")
        if text.count(crlf_old):
            old, new = crlf_old, _to_newline(new, "\r\n")
            count = text.count(old)
    if count == 0:
        hint = ""
        stripped = old.strip()
        if stripped and stripped != old and stripped in text:
            hint = " (it does occur without its leading/trailing whitespace)"
        raise OldTextNotFound(
            f"edit {rel}: `old` was not found (0 matches){hint}; read the file and copy "
            "the text exactly, including indentation"
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"edit {rel}: `old` occurs {count} times; include more surrounding lines so it "
            "is unique, or set all=true to replace every occurrence"
        )
    if replace_all:
        return text.replace(old, new), count
    return text.replace(old, new, 1), 1


def apply_edit_lines(text: str, start: int, end: int, content: str, rel: str) -> str:
    """Replace lines `start`..`end` (1-based, inclusive) of `text` with `content`.

    Rules:
    - `end == start - 1` inserts `content` before line `start` without replacing
      anything; `start = n + 1, end = n` appends to a file of n lines. (Inserting
      before line 1 cannot be written this way, since `end >= 1`: replace line 1
      with the new lines followed by the old line 1.)
    - In an empty file, `start = end = 1` stands for "the whole (empty) file".
    - `content == ""` deletes the lines.
    - `content` gets a line ending if it lacks one, unless it replaces the last line
      of a file that had no final newline; line endings follow the file (LF or CRLF).
    """
    lines = split_lines(text)
    n = len(lines)
    if n == 0 and start == 1 and end == 1:
        end = 0
    if end < start - 1:
        raise ToolError(
            f"edit_lines {rel}: end ({end}) is before start ({start}); the range is "
            "start..end inclusive (end = start - 1 inserts before start)"
        )
    if start > n + 1:
        raise RangePastEnd(
            f"edit_lines {rel}: start ({start}) is past the end of the file ({n} lines); "
            f"to append use start={n + 1}, end={n}",
            n,
        )
    if end > n:
        raise RangePastEnd(
            f"edit_lines {rel}: end ({end}) is past the end of the file ({n} lines)", n
        )
    nl = _newline(text)
    block = _to_newline(content, nl)
    before, replaced, after = lines[: start - 1], lines[start - 1 : end], lines[end:]
    if before and not after and not replaced and not before[-1].endswith("\n"):
        before[-1] += nl  # appending after a last line that had no newline
    if block and not block.endswith("\n"):
        last_had_no_newline = not after and bool(replaced) and not replaced[-1].endswith("\n")
        at_eof_insertion = not after and not replaced
        if not (last_had_no_newline or (at_eof_insertion and n > 0 and text[-1:] != "\n")):
            block += nl
    return "".join(before) + block + "".join(after)


def changed_range(old: str, new: str) -> tuple[int, int] | None:
    """1-based inclusive range of OLD lines the change touches (None if nothing changes).

    A pure insertion is reported as the old line it lands before (the last line at
    the end of the file), so an editor has a line to anchor a diagnostic to.
    """
    a, b = split_lines(old), split_lines(new)
    spans: list[tuple[int, int]] = []
    for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(None, a, b).get_opcodes():
        if tag != "equal":
            spans.append((i1 + 1, i2) if i2 > i1 else (i1 + 1, i1 + 1))
    if not spans:
        return None
    top = max(len(a), 1)
    lo = min(min(s for s, _ in spans), top)
    hi = min(max(e for _, e in spans), top)
    return lo, max(lo, hi)


def file_diff(old: str | None, new: str, rel: str, *, binary: bool = False) -> str:
    """A git-style unified diff with a/ b/ prefixes; /dev/null for a new file. The path
    in the headers is as a reviewer must see it (`shown_path`)."""
    rel = shown_path(rel)
    if binary:
        return f"Binary files a/{rel} and b/{rel} differ\n"
    return unified_diff(old or "", new, f"a/{rel}" if old is not None else "/dev/null", f"b/{rel}")
