"""A Python change whose only fault is its indentation, shifted to fit where it goes.

The small model writes the right line at the wrong depth more often than the wrong line:
on the learning scenarios most dropped retries were edits that "would leave the file not
parsing (unexpected indent / expected an indented block)", among them the only ones that
followed the correction. A re-indented variant keeps every character the model wrote but
the leading whitespace, shifted as one block (relative indentation kept) to a depth read
from the file: the line replaced or inserted before, the line above, one level under the
line above when it opens a block. `calls.repaired` tries them, in that order, and keeps
the first that parses.
"""

from __future__ import annotations

import re
import textwrap

from continual_lsp.text import split_lines
from continual_lsp.tools.base import ToolCall

# What Python's parser says of a block at the wrong depth (tools.checks passes it on).
INDENT_PROBLEMS = re.compile(
    r"unexpected indent|expected an indented block|unindent does not match|"
    r"unexpected unindent|inconsistent use of tabs",
    re.I,
)
LEVEL = "    "
# The note of a change shown re-indented (`calls.repaired`).
NOTE = "re-indented to fit the file (the model's lines otherwise as written)"


def is_indentation(problem: str) -> bool:
    return INDENT_PROBLEMS.search(problem) is not None


def variants(call: ToolCall, text: str) -> list[ToolCall]:
    """`call` (an edit_lines or an edit of `text`, the file as it is) with its written
    text shifted to each depth the file suggests, likeliest first, without duplicates
    or the call itself."""
    lines = [line.rstrip("\r\n") for line in split_lines(text)]
    if call.tool == "edit_lines":
        args = call.arguments
        content = str(args.get("content", ""))
        found = [
            {**args, "content": _shifted(content, depth)}
            for depth in _depths(lines, int(args["start"]))
        ]
    elif call.tool == "edit":
        found = _edit_variants(call.arguments, text, lines)
    else:
        return []
    out: list[ToolCall] = []
    for arguments in found:
        variant = ToolCall(tool=call.tool, arguments=arguments)
        if variant != call and variant not in out:
            out.append(variant)
    return out


def _depths(lines: list[str], start: int) -> list[str]:
    """Depths for text that goes at line `start` (1-based): that line's, the line
    above's, one level under the line above when it ends a block opener."""
    depths: list[str] = []
    at = lines[start - 1] if 1 <= start <= len(lines) else ""
    if at.strip():
        depths.append(_indent(at))
    above = next((ln for ln in reversed(lines[: max(start - 1, 0)]) if ln.strip()), None)
    if above is not None:
        if above.rstrip().endswith(":"):
            depths.append(_indent(above) + _unit(lines))
        depths.append(_indent(above))
    return list(dict.fromkeys(depths))


def _edit_variants(args: dict[str, object], text: str, lines: list[str]) -> list[dict[str, object]]:
    """An edit replaces `old` where it stands: its first line continues that line, so only
    the lines after it are shifted, to the depth of the line `old` starts on (or one
    level under it when `new` opens a block there)."""
    old, new = str(args.get("old", "")), str(args.get("new", ""))
    first, _, rest = new.partition("\n")
    if not rest or text.count(old) != 1:
        return []
    row = text[: text.index(old)].count("\n")
    depth = _indent(lines[row]) if row < len(lines) else ""
    depths = [depth + _unit(lines), depth] if first.rstrip().endswith(":") else [depth]
    return [{**args, "new": first + "\n" + _shifted(rest, d)} for d in depths]


def _shifted(block: str, depth: str) -> str:
    """`block` with its common leading whitespace replaced by `depth` (blank lines kept
    empty)."""
    return textwrap.indent(textwrap.dedent(block), depth)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _unit(lines: list[str]) -> str:
    """One indentation level as the file writes it (a tab, else four spaces)."""
    return "\t" if any(ln.startswith("\t") for ln in lines) else LEVEL
