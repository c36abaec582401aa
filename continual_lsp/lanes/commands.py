"""Shell command lines split by the shell's own word rules, for the guards and allow rules.

One parser for both: a deny guard must see every command a line runs, and an allow rule
must never approve a line whose words differ from the ones bash will run. So the split
follows bash: quotes and backslashes as bash reads them, and `#` starts a comment only at
the start of a word (`x#; touch F` is the word `x#`, then `touch F`; Python's `shlex`
reads a comment there and hides the rest).

`parse` also says why a line is not plain words: anything bash expands or wires before
the words run (substitutions, variables, redirections, here-documents, globs that can
expand into an option, brace expansion), a control operator other than `;`, `&&`, `||`
and `|`, a newline, an unclosed quote. No allow rule approves such a line; the guards
still judge the commands inside it, a substitution's included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# The control operators a compound command is split on; each side is judged on its own.
SPLIT_OPERATORS = frozenset({";", "&&", "||", "|"})
# First words that make a segment shell grammar, not a command.
KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case",
     "esac", "select", "function", "coproc", "{", "}", "[[", "]]", "!"}
)  # fmt: skip
_OPERATORS = ("&&", "||", ";;&", ";;", ";&", "|&", "&", "|", ";", "((", "))", "(", ")")
_MAX_DEPTH = 8  # nested substitutions scanned for the guards; deeper is refused whole
_BRACE_EXPANSION = re.compile(r"\{[^{}]*(?:,|\.\.)[^{}]*\}")
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*(?:\[[^\]]*\])?\+?=")
_GLOB = frozenset("*?[")
_QUOTED = "\0"  # stands for a quoted character when a word's unquoted shape is checked
UNCLOSED = "it has an unclosed quote"  # bash runs nothing of such a line


@dataclass
class Parsed:
    """Words of each simple command (a substitution's commands included) and why the line
    is not plain words (empty: it is)."""

    segments: list[list[str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def plain(self) -> bool:
        return not self.problems


class _Scanner:
    def __init__(self, text: str, depth: int) -> None:
        self.s = text
        self.i = 0
        self.depth = depth
        self.segments: list[list[str]] = [[]]
        self.inner: list[list[str]] = []  # commands of substitutions, after the line's own
        self.problems: list[str] = []
        self.word: list[str] | None = None  # None: between words
        self.shape: list[str] = []  # the word with quoted characters as _QUOTED

    def problem(self, why: str) -> None:
        if why not in self.problems:
            self.problems.append(why)

    def add(self, text: str, quoted: bool) -> None:
        if self.word is None:
            self.word, self.shape = [], []
        self.word.append(text)
        self.shape.append(_QUOTED * len(text) if quoted else text)

    def end_word(self) -> None:
        if self.word is None:
            return
        word, shape = "".join(self.word), "".join(self.shape)
        self.word = None
        current = self.segments[-1]
        if not current and _ASSIGNMENT.match(shape):
            self.problem("it sets a variable")
        if not current and shape in KEYWORDS:
            self.problem(f"it uses the shell keyword `{shape}`")
        if _BRACE_EXPANSION.search(shape):
            self.problem("it uses brace expansion")
        if shape[:1] == "~":
            self.problem("it uses tilde expansion")
        glob_at = min((shape.find(c) for c in _GLOB if c in shape), default=-1)
        if glob_at >= 0 and not shape[:glob_at].lstrip(_QUOTED).strip("-"):
            self.problem("it has a glob that can expand into an option")
        current.append(word)

    def cut(self) -> None:
        self.end_word()
        if self.segments[-1]:
            self.segments.append([])

    def run(self) -> Parsed:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t":
                self.end_word()
                self.i += 1
            elif c == "\n":
                self.problem("it has a newline")
                self.cut()
                self.i += 1
            elif c == "#" and self.word is None:
                end = s.find("\n", self.i)
                self.i = len(s) if end < 0 else end
            elif c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    self.problem(UNCLOSED)
                    end = len(s)
                self.add(s[self.i + 1 : end], quoted=True)
                self.i = end + 1
            elif c == '"':
                self.double_quoted()
            elif c == "\\":
                self.escape()
            elif c == "$":
                self.dollar()
            elif c == "`":
                self.backticks()
            elif c in "<>" or s.startswith("&>", self.i):
                self.redirection()
            elif c in ";&|()":
                self.operator()
            elif c < " " or c == "\x7f":
                self.problem("it has a control character")
                self.add(c, quoted=False)
                self.i += 1
            else:
                self.add(c, quoted=False)
                self.i += 1
        self.end_word()
        segments = [w for w in self.segments + self.inner if w]
        return Parsed(segments=segments, problems=self.problems)

    def escape(self) -> None:
        nxt = self.s[self.i + 1 : self.i + 2]
        if nxt == "\n":  # a line continuation: bash drops both
            self.i += 2
            return
        if not nxt:
            self.problem("it ends in a backslash")
        self.add(nxt or "\\", quoted=True)
        self.i += 2

    def double_quoted(self) -> None:
        s = self.s
        self.i += 1
        self.add("", quoted=True)  # `""` is still a word
        while self.i < len(s):
            c = s[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\" and s[self.i + 1 : self.i + 2] in ('"', "\\", "$", "`", "\n"):
                if s[self.i + 1] != "\n":
                    self.add(s[self.i + 1], quoted=True)
                self.i += 2
            elif c == "$":
                self.dollar()
            elif c == "`":
                self.backticks()
            else:
                self.add(c, quoted=True)
                self.i += 1
        self.problem(UNCLOSED)

    def dollar(self) -> None:
        s = self.s
        if s.startswith("$(", self.i):
            arithmetic = s.startswith("$((", self.i)
            self.problem(
                "it has an arithmetic expansion" if arithmetic else "it has a substitution"
            )
            self.substitution(self.i + 2)
            return
        self.problem("it expands a variable")
        self.add("$", quoted=False)
        self.i += 1

    def backticks(self) -> None:
        self.problem("it has a substitution")
        s, start = self.s, self.i + 1
        end = start
        while end < len(s) and s[end] != "`":
            end += 2 if s[end] == "\\" else 1
        if end >= len(s):
            self.problem(UNCLOSED)
        body = s[start:end]
        self.add(s[self.i : end + 1], quoted=False)
        self.i = end + 1
        self.scan_inner(re.sub(r"\\([`$\\])", r"\1", body))

    def substitution(self, start: int) -> None:
        """`$(…)`, `<(…)`, `>(…)` from `start` (after the paren): its commands are scanned
        too, so a guard sees `curl` in `echo $(curl x)`."""
        s, depth, j = self.s, 1, start
        while j < len(s):
            c = s[j]
            if c == "\\":
                j += 2
                continue
            if c in "'\"":
                close = s.find(c, j + 1)
                j = len(s) if close < 0 else close + 1
                continue
            depth += {"(": 1, ")": -1}.get(c, 0)
            if depth == 0:
                break
            j += 1
        if depth:
            self.problem("it has an unclosed substitution")
        self.add(s[self.i : j + 1], quoted=False)
        self.i = j + 1
        self.scan_inner(s[start:j])

    def scan_inner(self, body: str) -> None:
        if self.depth >= _MAX_DEPTH:
            self.problem("it nests substitutions too deeply")
            return
        inner = _Scanner(body, self.depth + 1).run()
        self.inner.extend(inner.segments)

    def redirection(self) -> None:
        s = self.s
        if s[self.i] in "<>" and s.startswith("(", self.i + 1):
            self.problem("it has a process substitution")
            self.end_word()
            self.substitution(self.i + 2)
            return
        here = s.startswith("<<", self.i)
        self.problem("it has a here-document" if here else "it redirects input or output")
        self.end_word()
        while self.i < len(s) and s[self.i] in "<>&|-":
            self.i += 1

    def operator(self) -> None:
        op = next(o for o in _OPERATORS if self.s.startswith(o, self.i))
        self.i += len(op)
        if op not in SPLIT_OPERATORS:
            self.problem(f"it uses the operator `{op}`")
        self.cut()


def parse(cmd: str) -> Parsed:
    """The simple commands of `cmd` as bash splits them, and what makes it not plain words."""
    return _Scanner(cmd, 0).run()
