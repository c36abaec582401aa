"""An edit whose `old` text is not in the file, narrowed to the part that differs.

The small model often means the right change but writes `old` as it imagines the line:
`data/report.txt` where the code builds the path from `"data"` and `"report.txt"`,
`return totl` with other spacing. What it changes is usually right; the context around
it is not. A narrowed variant keeps only the span where `old` and `new` differ, widened
to the nearest token boundary (first at spaces, then at punctuation too, then to the
word), so `data/report.txt` → `data/summary.txt` becomes `report.txt` → `summary.txt`.
`calls.repaired` tries the variants in that order and keeps the first that occurs in the
file exactly once; the proposal says it was narrowed, and the reviewer sees the diff.
"""

from __future__ import annotations

from continual_lsp.tools.base import ToolCall

# The note of an edit shown narrowed (`calls.repaired`).
NOTE = "narrowed to the part that changes (`old` as written is not in the file)"
# A narrowed `old` shorter than this matches too much by chance (a lone operator).
MIN_OLD = 3
# Where a narrowed span may end, loosest first: spaces; punctuation as well; any
# non-word character.
_BOUNDARIES = (
    frozenset(" \t\r\n"),
    frozenset(" \t\r\n'\"`/\\()[]{}<>,;:="),
    None,  # not a word character
)


def _is_boundary(ch: str, stops: frozenset[str] | None) -> bool:
    return not (ch.isalnum() or ch == "_") if stops is None else ch in stops


def variants(call: ToolCall) -> list[ToolCall]:
    """Narrowed variants of an `edit` call, widest first, without duplicates or the call
    itself; none for any other tool or an edit with `all` set (each occurrence matters)."""
    if call.tool != "edit" or call.arguments.get("all"):
        return []
    old, new = str(call.arguments["old"]), str(call.arguments["new"])
    prefix = 0
    while prefix < min(len(old), len(new)) and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(old), len(new)) - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    out: list[ToolCall] = []
    seen = {(old, new)}
    for stops in _BOUNDARIES:
        start = prefix
        while start > 0 and not _is_boundary(old[start - 1], stops):
            start -= 1
        end = suffix  # characters kept from the shared tail
        while end > 0 and not _is_boundary(old[len(old) - end], stops):
            end -= 1
        narrow_old, narrow_new = old[start : len(old) - end], new[start : len(new) - end]
        if len(narrow_old.strip()) < MIN_OLD or (narrow_old, narrow_new) in seen:
            continue
        seen.add((narrow_old, narrow_new))
        out.append(
            ToolCall(
                tool="edit",
                arguments={**call.arguments, "old": narrow_old, "new": narrow_new},
            )
        )
    return out
