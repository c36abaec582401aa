"""Text as the tools number it: lines, unified diffs and clipped snippets.

One reading of "a line" for every diff and line count in the package: only `\\n` ends a
line (`str.splitlines` also splits on `\\x0c`, `\\x1c`, `\\u2028` and friends, which would
misnumber the lines of files that contain them, and `edit_lines` counts with this).
"""

from __future__ import annotations

import difflib
import itertools
import unicodedata


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


# Characters a reviewer cannot see, or that change how the text around them is shown:
# format characters (bidi overrides such as U+202E, zero-width joiners and spaces),
# controls, line and paragraph separators, private-use, surrogates and unassigned code
# points; and spaces other than the ASCII one, which look like it.
_HIDDEN_CATEGORIES = frozenset({"Cf", "Cc", "Zl", "Zp", "Co", "Cs", "Cn"})


def hidden_char(ch: str) -> bool:
    """True for a character that is invisible or reorders text (see _HIDDEN_CATEGORIES)."""
    category = unicodedata.category(ch)
    return category in _HIDDEN_CATEGORIES or (category == "Zs" and ch != " ")


def _script(ch: str) -> str:
    """The script a letter belongs to, by the first word of its Unicode name (LATIN,
    CYRILLIC, GREEK, ...)."""
    return unicodedata.name(ch, "UNKNOWN").split(" ", 1)[0]


def _escaped(ch: str) -> str:
    return f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"


def shown_path(path: str) -> str:
    """`path` as a reviewer must see it, one rule wherever a path is shown.

    Escaped as ``\\uXXXX``: every hidden character (`hidden_char`: ``src/a\\u202etxt.exe``
    would otherwise show as ``src/aexe.txt``), and, in a word (a run of letters) whose
    letters come from more than one script, every non-ASCII letter (``p\\u0430ypal.py``:
    a Cyrillic а among Latin letters). A word in one script (``файл.txt``, ``café``) is
    shown as it is. A backslash is doubled so that no escape can be faked.
    """
    out = []
    # Words are runs of letters; a hidden character inside one does not split it.
    for in_word, run in itertools.groupby(path, key=lambda ch: ch.isalpha() or hidden_char(ch)):
        chars = list(run)
        mixed = in_word and len({_script(ch) for ch in chars if ch.isalpha()}) > 1
        for ch in chars:
            if ch == "\\":
                out.append("\\\\")
            elif hidden_char(ch) or (mixed and ch.isalpha() and not ch.isascii()):
                out.append(_escaped(ch))
            else:
                out.append(ch)
    return "".join(out)
