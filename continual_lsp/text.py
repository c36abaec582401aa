"""Text as the tools number it: lines, unified diffs and clipped snippets.

One reading of "a line" for every diff and line count in the package: only `\\n` ends a
line (`str.splitlines` also splits on `\\x0c`, `\\x1c`, `\\u2028` and friends, which would
misnumber the lines of files that contain them, and `edit_lines` counts with this).
"""

from __future__ import annotations

import difflib


def split_lines(text: str) -> list[str]:
    """Lines with their `\\n` kept; "" -> []; a last line without a newline is kept."""
    if not text:
        return []
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def unified_diff(old: str, new: str, from_file: str, to_file: str) -> str:
    """A unified diff of `old` and `new` by `split_lines`, with git's marker after a last
    line that has no newline (so the next line of the diff never runs into it)."""
    out: list[str] = []
    for line in difflib.unified_diff(split_lines(old), split_lines(new), from_file, to_file):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    """(removed, added) lines of a unified diff, without their +/- and without headers."""
    lines = diff.splitlines()
    removed = [x[1:] for x in lines if x.startswith("-") and not x.startswith("---")]
    added = [x[1:] for x in lines if x.startswith("+") and not x.startswith("+++")]
    return removed, added


def clip(text: str, limit: int, *, say_cut: bool = False) -> str:
    """`text` cut to `limit` characters and marked "…"; `say_cut` also says how many went."""
    if len(text) <= limit:
        return text
    cut = f" … ({len(text) - limit} chars cut)" if say_cut else "…"
    return text[:limit] + cut
