"""Guard patterns on a linear-time engine, never on Python's backtracking `re`.

A guard's pattern is learned from a correction's text (`a*b` in "never use `a*b`" becomes
`\\ba\\w*b`) and runs on every proposal, on the server's threads: with `re` one pattern
such as `\\ba\\w*a\\w*…c` took minutes on a line of 80 `a`s while holding the GIL, and
every user of the server waited. So a pattern compiles with RE2 (as grep's and the glob
tool's do: `tools.globs`), which matches in time linear in the text.

RE2 has no lookaround and no backreferences; the project's own rule shapes use
lookaround (`(?![\\w-])` after a program name, "a name not in snake case"), with the
rule's text escaped into a fixed template. Those run on the `regex` engine under a
deadline with the GIL released: past `DEADLINE_S` the match raises `PatternTimeout`,
which the guard set treats as any guard failure (it fails open to the reviewer, and is
disabled after repeated failures). A pattern neither engine compiles is refused when the
rule is built (`check`), with the reason.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import re2
import regex

DEADLINE_S = 0.1  # per match, for a pattern RE2 cannot run
# Python's `\Z` (the very end) is RE2's `\z`; after an even run of backslashes only.
_END_OF_TEXT = re.compile(r"(?<!\\)((?:\\\\)*)\\Z")


class PatternTimeout(Exception):
    """A pattern RE2 cannot run took longer than `DEADLINE_S` on one text."""


class Pattern:
    """One compiled guard pattern: RE2 when it can, else `regex` under a deadline."""

    def __init__(self, source: str, ignore_case: bool, multiline: bool) -> None:
        self.source = source
        self.linear: Any = None
        self.bounded: Any = None
        options = re2.Options()
        options.log_errors = False
        options.case_sensitive = not ignore_case
        inline = "(?m)" if multiline else ""
        try:
            self.linear = re2.compile(inline + _END_OF_TEXT.sub(r"\1\\z", source), options)
        except re2.error as exc:
            linear_error = exc.args[0].decode("utf-8", "replace") if exc.args else "invalid"
            flags = (regex.I if ignore_case else 0) | (regex.M if multiline else 0)
            try:
                self.bounded = regex.compile(source, flags | regex.V0)
            except regex.error as err:
                raise ValueError(
                    f"invalid pattern {source!r}: {linear_error}; {err}".rstrip()
                ) from None

    def search(self, text: str) -> bool:
        if self.linear is not None:
            return self.linear.search(text) is not None
        try:
            return self.bounded.search(text, timeout=DEADLINE_S, concurrent=True) is not None
        except TimeoutError:
            raise PatternTimeout(f"pattern {self.source!r} ran past {DEADLINE_S} s") from None

    def sub(self, template: str, text: str) -> str:
        if self.linear is not None:
            return str(self.linear.sub(template, text))
        try:
            return str(self.bounded.sub(template, text, timeout=DEADLINE_S, concurrent=True))
        except TimeoutError:
            raise PatternTimeout(f"pattern {self.source!r} ran past {DEADLINE_S} s") from None


@lru_cache(maxsize=1024)
def compiled(source: str, ignore_case: bool = False, multiline: bool = False) -> Pattern:
    """The compiled pattern (cached: guards run on every proposal); ValueError if invalid."""
    return Pattern(source, ignore_case, multiline)


def search(source: str, text: str, *, ignore_case: bool = False, multiline: bool = False) -> bool:
    return compiled(source, ignore_case, multiline).search(text)


def check(source: str) -> str:
    """`source` if a guard can run it (a pydantic validator); ValueError saying why not."""
    compiled(source)
    return source
