"""Where the task says the work is: a file change that lands elsewhere is put where the
task names, or waits for a look at the place it names.

The 135M model often acts before it looks. On the agent-skill dev draw, two of its
five unfinished one-step tasks wrote the new file the task named at another path
("Create src_lib/atlas.py with …" became `src_lib/tool_result.py`), and two changed a
file the task has nothing to do with, unread ("loom_width prints a leftover debugging
line" became an edit of README.md's line 3), though the function it names is defined in
the workspace. What a careful colleague does instead is the rule here (`moved_write`,
`place_to_look`):
- a new file written at a path the task does not name, while the task names a file
  (or a folder) still to be created, is written there (`substitution.named_calls`);
- a change to a file that neither the task names nor defines what it names, and whose
  new text does not use it either, gives way to a read of the place the task names
  that this task has not seen: a file it names, else where a name it mentions (a
  constant too) is defined. Once seen, a place never stops the model again.
Two more were tried on the dev draws and dropped (docs/evidence.md, sessions 27-28):
the files a failing check's output points at as such places (multi-step 19 of 24
against 20 on the first draw; on the second it fired in two tasks and finished
neither), and a read before a change by line numbers to a file not seen (one-step
unchanged at 34 of 36).
"""

from __future__ import annotations

import re

from continual_lsp.agent.substitution import named_calls, named_paths
from continual_lsp.tools.base import FILE_CHANGING_TOOLS, Preview, ToolCall, ToolError
from continual_lsp.tools.runner import ToolRunner

# A name the task mentions that code would define: snake_case, camelCase, a constant
# (LEASE_SECONDS), or a call ("mean()"). Plain words are not names: "fix the typo" names
# nothing to look up, and neither does an acronym ("README", "JSON").
_NAME = re.compile(
    r"(?<![\w./-])([A-Za-z_]\w*)(?=\(\))"
    r"|(?<![\w./-])([a-z]\w*_\w+|[a-z]+[A-Z]\w*|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b"
)
# How Python and JavaScript define a name, as an RE2 pattern for the grep tool.
_DEFINES = (
    r"(?:def|class|function|const|let|var)\s+(?:{names})\b"
    r"|^\s*(?:{names})\s*=[^=]|exports\.(?:{names})\s*="
)
_GREP_LINE = re.compile(r"^(.+?):\d+:")


def in_workspace(tools: ToolRunner, named: list[str]) -> list[str]:
    """The named paths as `target_path` writes them ("./src/x.py" is the candidates'
    "src/x.py"), a folder with its trailing "/", once each; none outside the workspace."""
    found: list[str] = []
    for raw in named:
        try:
            path = tools.rel(tools.resolve(raw))
        except ToolError:
            continue
        if path != ".":
            path += "/" if raw.endswith("/") else ""
            if path not in found:
                found.append(path)
    return found


def named_names(text: str) -> list[str]:
    """The code names `text` mentions (paths left out), once each, in order."""
    found: list[str] = []
    for match in _NAME.finditer(re.sub(r"\S*/\S*", " ", text)):
        name = match.group(1) or match.group(2)
        if name not in found:
            found.append(name)
    return found


def moved_write(tools: ToolRunner, text: str, call: ToolCall) -> ToolCall | None:
    """`call` written where the task `text` says a new file goes, when it creates a
    file the task does not name; None when it already lands there or nothing is named."""
    if call.tool != "write":
        return None
    target = tools.target_path(call)
    named = in_workspace(tools, named_paths(text))
    if target is None or tools.resolve(target).exists() or target in named:
        return None
    if any(p.endswith("/") and target.startswith(p) for p in named):
        return None
    for moved in named_calls(text, call):
        path = tools.target_path(moved)
        if path is not None and not tools.resolve(path).exists():
            return moved
    return None


def place_to_look(
    tools: ToolRunner, text: str, call: ToolCall, preview: Preview | None, seen: set[str]
) -> str | None:
    """The file to read before the change `call` is shown, or None: it may be shown.

    A change away from everything the task `text` names waits for the first such place
    not in `seen` (read or changed in this task): a file the task names, else one that
    defines a name it mentions. A change on such a place, or whose new text uses a name
    the task mentions, is not away from it; new text that defines such a name is, when
    the workspace defines it elsewhere (dev draw: `def gear_ratio` written into a new
    `gendercale.txt` for "gear_ratio never hands its result back")."""
    if call.tool not in FILE_CHANGING_TOOLS:
        return None
    target = tools.target_path(call)
    names = named_names(text)
    new_text = preview.new_content if preview is not None else ""
    mentioned = [name for name in names if name in new_text]
    if target is None or (mentioned and not _defines(new_text, mentioned)):
        return None
    if preview is not None and preview.old_content and _defines(preview.old_content, names):
        return None  # the file defines what the task names: no grep needed to say so
    files = [p for p in in_workspace(tools, named_paths(text)) if tools.resolve(p).is_file()]
    if target in files:
        return None  # before the grep: it walks the workspace (~0.4 s at 1,000 files)
    places = list(dict.fromkeys([*files, *_defining(tools, names)]))
    if target in places:
        return None
    return next((p for p in places if p not in seen), None)


def _definition(names: list[str]) -> str:
    """The pattern of a definition of one of `names`, for the grep tool and for `re`."""
    return _DEFINES.format(names="|".join(re.escape(n) for n in names))


def _defines(text: str, names: list[str]) -> bool:
    return bool(names) and re.search(_definition(names), text, re.M) is not None


def _defining(tools: ToolRunner, names: list[str]) -> list[str]:
    """The workspace files that define one of `names`, as the grep tool finds them, in
    the order the task names what they define."""
    if not names:
        return []
    try:
        result = tools.execute(ToolCall(tool="grep", arguments={"pat": _definition(names)}))
    except ToolError:
        return []
    first: dict[str, int] = {}
    for line in result.output.splitlines():
        match = _GREP_LINE.match(line)
        if match is None:
            continue
        rest = line[match.end() :]
        rank = min((i for i, n in enumerate(names) if re.search(rf"\b{n}\b", rest)), default=0)
        path = match.group(1)
        first[path] = min(first.get(path, rank), rank)
    return sorted(first, key=lambda path: first[path])
