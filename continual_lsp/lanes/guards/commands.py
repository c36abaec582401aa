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

`command_segments` normalises each simple command for the guards (wrappers and `VAR=`
prefixes dropped, `npx X` also read as `X`); `commit_messages` and `is_commit` read
`git commit` out of a line.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from continual_lsp.tools.base import ToolCall

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


# Words that run the rest of the segment as a command of its own.
_WRAPPERS = frozenset({"sudo", "env", "command", "exec", "nohup", "time", "nice", "xargs"})
# Package runners: `npx tsc` and `pnpm dlx tsc` also run `tsc`.
_RUNNERS = {"npx": 1, "bunx": 1, "pnpx": 1, "uvx": 1, "pnpm": 2, "yarn": 2, "bun": 2}
_SPLIT_TOKENS = frozenset({"&&", "||", ";", "|", "&", "|&", ";;", "(", ")", "((", "))", "$("})


def command_segments(cmd: str) -> list[str]:
    """Every simple command of a compound one, normalised, for judging one at a time.

    Split by the shell's word rules (`parse`: every control operator, the
    commands inside substitutions too); each segment loses its `VAR=value` prefixes and
    wrappers (`sudo`, `env`, …); `npx X` / `pnpm dlx X` also yield `X …`. A command with
    an unclosed quote (bash runs none of it) is split on the operators by a regex.
    """
    parsed = parse(cmd)
    segments = parsed.segments
    if UNCLOSED in parsed.problems:
        segments = [[]]
        for tok in (t for t in re.split(r"(&&|\|\||[;&|()])|\s+", cmd) if t):
            if tok in _SPLIT_TOKENS or set(tok) <= set(";&|()"):
                segments.append([])
            else:
                segments[-1].append(tok)
    out: list[str] = []
    for words in segments:
        while words and (re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]) or words[0] in _WRAPPERS):
            words = words[1:]
            while words and words[0].startswith("-"):
                words = words[1:]  # a wrapper's own flags (`sudo -E`, `nice -n`)
                if words and words[0].isdigit():
                    words = words[1:]
        if not words:
            continue
        out.append(shlex.join(words))
        skip = _RUNNERS.get(words[0])
        if skip == 1 and len(words) > 1:
            out.append(shlex.join(words[1:]))
        elif skip == 2 and len(words) > 2 and words[1] in ("dlx", "exec", "x"):
            out.append(shlex.join(words[2:]))
    return out


def commit_messages(cmd: str) -> list[str]:
    """The messages of every `git commit -m …` in a command (empty: none given)."""
    messages: list[str] = []
    for seg in command_segments(cmd):
        try:
            words = shlex.split(seg)
        except ValueError:
            words = seg.split()
        if words[:2] != ["git", "commit"]:
            continue
        for i, w in enumerate(words[2:], start=2):
            if w in ("-m", "--message") or re.fullmatch(r"-[a-z]*m", w):
                if i + 1 < len(words):
                    messages.append(words[i + 1])
            elif w.startswith("--message="):
                messages.append(w.split("=", 1)[1])
    return messages


def is_commit(call: ToolCall) -> bool:
    if call.tool != "bash":
        return False
    return any(seg.startswith("git commit") for seg in command_segments(bash_command(call)))


def bash_command(call: ToolCall) -> str:
    return str(call.arguments.get("cmd", ""))
