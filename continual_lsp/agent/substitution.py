"""The literal substitutions a correction spells out, applied to retry candidates.

"Use / instead of //", "replace print with logger.info", "change 60 to 5", "`pnpm`, not
`npm`": the reviewer names the exact text to swap. The embedded 135M model reading such a
correction usually finds the right line and then copies it unchanged (measured on the
README demo: four of six candidates rewrote line 7 as it was). The agent applies the
reviewer's own words to what the model wrote and offers the result as one more candidate;
the model still ranks it beside its samples by the correction's lift, and the guards and
the preview screen it like any other. Nothing here becomes a standing rule: a substitution
serves the retry that answers its correction, and is learned only through that retry.
"""

from __future__ import annotations

import re

from continual_lsp.tools.base import CALL_TOOLS, ToolCall

# A literal: a backticked span, or one run of non-space characters (trailing sentence
# punctuation is not part of it).
_LIT = r"(`[^`\n]{1,60}`|[^\s`]{1,60})"
_PATTERNS = [
    # (regex, group of the new text, group of the old text)
    (re.compile(rf"\buse\s+{_LIT}\s+(?:instead of|rather than)\s+{_LIT}", re.I), 1, 2),
    (re.compile(rf"\breplace\s+{_LIT}\s+(?:with|by)\s+{_LIT}", re.I), 2, 1),
    (re.compile(rf"\bchange\s+{_LIT}\s+(?:to|into)\s+{_LIT}", re.I), 2, 1),
    (re.compile(rf"{_LIT}\s*(?:->|→)\s*{_LIT}"), 2, 1),
    # "`X`, not `Y`" only when both are quoted: unquoted, "line 7, not 6" would swap numbers.
    (re.compile(r"(`[^`\n]{1,60}`),?\s+not\s+(`[^`\n]{1,60}`)"), 1, 2),
]
# Words that make a match prose, not a literal ("use it instead of that").
_PROSE = frozenset(
    [
        "a",
        "an",
        "the",
        "it",
        "this",
        "that",
        "these",
        "those",
        "one",
        "them",
        "its",
        "line",
        "lines",
        "file",
        "files",
        "here",
        "there",
        "something",
        "anything",
        "what",
        "which",
    ]
)
# The argument of each tool that carries the text the call writes or runs.
NEW_TEXT = {"write": "content", "edit": "new", "edit_lines": "content", "bash": "cmd"}


def _literal(raw: str) -> str | None:
    quoted = raw.startswith("`") and raw.endswith("`") and len(raw) > 2
    text = raw[1:-1] if quoted else raw.rstrip(".,;:!?")
    if not text or (not quoted and text.lower() in _PROSE):
        return None
    return text


def substitutions(correction: str) -> list[tuple[str, str]]:
    """(old, new) pairs the correction names, in the order written, without repeats."""
    found: list[tuple[str, str]] = []
    for pattern, new_group, old_group in _PATTERNS:
        for match in pattern.finditer(correction):
            old, new = _literal(match.group(old_group)), _literal(match.group(new_group))
            if old and new and old != new and (old, new) not in found:
                found.append((old, new))
    return found


def _swapped(text: str, pairs: list[tuple[str, str]]) -> str:
    for old, new in pairs:
        text = text.replace(old, new)
    return text


def apply(call: ToolCall, pairs: list[tuple[str, str]]) -> ToolCall | None:
    """`call` with every pair applied to the text it writes or runs; None when no pair's
    old text occurs there (nothing to offer)."""
    key = NEW_TEXT.get(call.tool)
    text = call.arguments.get(key) if key else None
    if not isinstance(text, str):
        return None
    changed = _swapped(text, pairs)
    if changed == text:
        return None
    return ToolCall(tool=call.tool, arguments={**call.arguments, key: changed})


def at_a_line(call: ToolCall) -> ToolCall:
    """An edit_lines insertion (end = start - 1) as the replacement of the line it goes
    before; any other call as it is. The model pointed there, and a swap applies to what
    a line holds, not to the gap before it (the README demo's retries after the starter
    learned to insert a missing `return`: "insert before line 7" for "change line 7")."""
    args = call.arguments
    if call.tool != "edit_lines" or args.get("end") != args.get("start", 0) - 1:
        return call
    return ToolCall(tool="edit_lines", arguments={**args, "end": args["start"]})


def apply_in_place(
    call: ToolCall, pairs: list[tuple[str, str]], replaced: str | None
) -> ToolCall | None:
    """`call` writing what it replaces with every pair applied: the place the model
    chose, the reviewer's words. `replaced` is the text an edit_lines call's range holds
    now (an edit's is its `old`). The 135M model finds the line a correction means but
    rewrites it wrongly as often as it copies it (the README demo after the path grammar
    changed its samples: none of six copied line 7), so the swap cannot wait for a copy.
    None when no pair's old text occurs there."""
    if call.tool == "edit":
        replaced = call.arguments.get("old")
    if call.tool not in ("edit", "edit_lines") or not isinstance(replaced, str):
        return None
    changed = _swapped(replaced, pairs)
    if changed == replaced:
        return None
    return ToolCall(tool=call.tool, arguments={**call.arguments, NEW_TEXT[call.tool]: changed})


# A command the reviewer spells out in backticks ("run it as `uv run pytest`"): a word,
# then its arguments (one word is a name: "`pnpm`, not `npm`"), no placeholder
# ("`fix(scope): ...`" is a pattern, not a command).
_COMMAND = re.compile(r"`([A-Za-z][\w.+-]* [^`\n]{1,80})`")
_WORD = re.compile(r"[A-Za-z][\w.-]{2,}")
# A tool the reviewer names as the one to use: "use write", "with `edit_lines`".
_TOOL = re.compile(
    r"\b(?:use|using|with|via|through)\s+(?:the\s+)?`?("
    + "|".join(sorted(CALL_TOOLS, key=lambda tool: (-len(tool), tool)))
    + r")`?(?![\w/]|\.\w)",
    re.I,
)
# What marks the span after it as the call not to make ("not `npm install`", "never
# touch vendor/x.py", "don't put it in app.py"): a refusal and at most three words.
_REFUSED = re.compile(
    r"\b(?:not|never|no|don't|do not|instead of|rather than)(?:\s+[\w'-]+){0,3}\s*$", re.I
)
# A file path the reviewer names ("tests/stations_test.py", "`src/pkg/units.py`"): folders,
# a name and an extension.
_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]*\w\.[A-Za-z]\w{0,5})(?![\w/])")
# … or a folder ("under src/pkg/"): the trailing slash says it is one.
_FOLDER = re.compile(r"(?<![\w/.:-])((?:[\w.-]+/)+)(?![\w-]|\.\w)")


def named_calls(correction: str, denied: ToolCall) -> list[ToolCall]:
    """The calls the correction names outright, in place of the denied one: for a denied
    command, each backticked command; for a denied write, the same content at each path
    named, or under the same name in each folder named (a call named twice comes twice:
    `candidates.substituted` keeps one). The reviewer often types exactly what to run
    or where the file goes, and the 135M model, shown it, still repeats its own call (a
    correction naming `uv run pytest` was followed in 2 of 11 retries, one naming the
    test file's path in none)."""
    found: list[ToolCall] = []
    if denied.tool == "bash":
        denied_words = set(_WORD.findall(denied.arguments["cmd"]))
        for match in _COMMAND.finditer(correction):
            cmd = match.group(1).strip()
            refused = _REFUSED.search(correction[: match.start()])
            if "..." in cmd or "…" in cmd or refused or cmd == denied.arguments["cmd"]:
                continue
            # A command about the same thing (`pnpm add lodash` for `npm install
            # lodash`); a prefix named alone ("put `uv run` before it") is not one.
            if denied_words & set(_WORD.findall(cmd)):
                found.append(ToolCall(tool="bash", arguments={"cmd": cmd}))
    elif denied.tool == "write":
        name = denied.arguments["path"].rsplit("/", 1)[-1]
        for named in named_paths(correction):
            path = named + name if named.endswith("/") else named
            if path != denied.arguments["path"]:
                found.append(ToolCall(tool="write", arguments={**denied.arguments, "path": path}))
    return found


def named_paths(correction: str) -> list[str]:
    """The file paths and folders (with their trailing "/") the correction names as
    where to work ("put it in src/pkg/units.py", "under src/pkg/"), not those it
    refuses ("not vendor/"), in the order written (a path named twice comes twice)."""
    found = sorted(
        (match.start(), match.group(1))
        for pattern in (_PATH, _FOLDER)
        for match in pattern.finditer(correction)
    )
    return [path for start, path in found if not _REFUSED.search(correction[:start].rstrip("`"))]


def named_tools(correction: str) -> list[str]:
    """The tools the correction names as the ones to use ("use write with the whole
    file", "do it with `edit_lines`"), not those it refuses ("don't use edit"), in the
    order written."""
    found: list[str] = []
    for match in _TOOL.finditer(correction):
        tool = match.group(1).lower()
        if not _REFUSED.search(correction[: match.start()]) and tool not in found:
            found.append(tool)
    return found
