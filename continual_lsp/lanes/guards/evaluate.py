"""One rule judged on one call: ("allow", None), ("block", None) or ("rewrite", args).

Declarative rules are evaluated in process: they are data, not code. A `python` rule runs
in the sandbox (`guard_code`); when it crashes, times out or answers nonsense it raises
`GuardFailure` and the guard set fails *open* (the reviewer is the real gate). Sequence
and read-first rules are judged on the task's history (`missing_first`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from continual_lsp.lanes.guards import patterns
from continual_lsp.lanes.guards.commands import (
    bash_command,
    command_segments,
    commit_messages,
    is_commit,
)
from continual_lsp.lanes.guards.guard_code import run_guard_code
from continual_lsp.lanes.guards.spec import (
    CommandRule,
    CommitMessageRule,
    ContentRule,
    KeepRule,
    NamingRule,
    PathRule,
    PythonRule,
    ReadFirstRule,
    Rule,
    SequenceRule,
    SizeRule,
    ToolRule,
)
from continual_lsp.text import changed_lines
from continual_lsp.tools.base import FILE_CHANGING_TOOLS, Preview, ToolCall
from continual_lsp.tools.globs import path_matches

PYTHON_GUARD_TIMEOUT_S = 2.0


def added_text(call: ToolCall, preview: Preview | None) -> str:
    """The lines a call adds: from the preview's diff when we have it (an edit that keeps
    an old `println` must not be blamed for it), else from the arguments."""
    if preview is not None and preview.diff:
        return "\n".join(changed_lines(preview.diff)[1])
    args = call.arguments
    return str(args.get("content") or args.get("new") or "")


def call_path(call: ToolCall, preview: Preview | None) -> str | None:
    if preview is not None:
        return preview.path
    path = call.arguments.get("path")
    return str(path) if isinstance(path, str) else None


_CASE_STYLES = {
    "kebab": r"[a-z0-9]+(-[a-z0-9]+)*",
    "snake": r"[a-z0-9]+(_[a-z0-9]+)*",
    "camel": r"[a-z][a-zA-Z0-9]*",
    "pascal": r"[A-Z][a-zA-Z0-9]*",
}


_BASH_WRITES = re.compile(r"(>|\bsed\s+-i|\brm\b|\bmv\b|\bcp\b|\btee\b|\btouch\b|\btruncate\b)")


def _bash_paths(cmd: str) -> list[str]:
    return [t.strip("'\"") for t in re.split(r"[\s;&|<>()]+", cmd) if t]


def rule_verdict(rule: Rule, call: ToolCall, preview: Preview | None) -> tuple[str, Any]:
    """("allow", None) | ("block", None) | ("rewrite", new_arguments).

    Raises `GuardFailure` when a python rule's sandboxed code fails."""
    if isinstance(rule, ToolRule):
        return _eval_tool_rule(rule, call, preview)
    if isinstance(rule, PathRule):
        return _eval_path_rule(rule, call, preview)
    if isinstance(rule, CommandRule):
        return _eval_command_rule(rule, call)
    if isinstance(rule, ContentRule):
        return _eval_content_rule(rule, call, preview)
    if isinstance(rule, CommitMessageRule):
        return _eval_commit_message_rule(rule, call)
    if isinstance(rule, NamingRule):
        return _eval_naming_rule(rule, call, preview)
    if isinstance(rule, (SequenceRule, ReadFirstRule)):
        return "allow", None  # judged on the task's history (`Guard.check(history=…)`)
    if isinstance(rule, SizeRule):
        return _eval_size_rule(rule, call, preview)
    if isinstance(rule, KeepRule):
        return _eval_keep_rule(rule, call, preview)
    if isinstance(rule, PythonRule):
        return _eval_python_rule(rule, call, preview)
    raise TypeError(f"not a rule: {rule!r}")


def _eval_tool_rule(rule: ToolRule, call: ToolCall, preview: Preview | None) -> tuple[str, Any]:
    if call.tool in rule.deny and (
        not rule.existing_files_only or (preview is not None and preview.old_content is not None)
    ):
        return "block", None
    if rule.allow is not None and call.tool not in rule.allow:
        return "block", None
    return "allow", None


def _eval_path_rule(rule: PathRule, call: ToolCall, preview: Preview | None) -> tuple[str, Any]:
    if rule.existing_only:
        return _eval_existing_path_rule(rule, call, preview)
    path = call_path(call, preview)
    if path is not None and rule.files and not path_matches(path, rule.files):
        return "allow", None
    if call.tool in rule.tools and path is not None:
        inside = path_matches(path, rule.globs)
        if (rule.mode == "deny") == inside:
            return "block", None
    if call.tool == "bash" and rule.mode == "deny":
        cmd = str(call.arguments.get("cmd", ""))
        if _BASH_WRITES.search(cmd) and any(
            path_matches(p, rule.globs) and (not rule.files or path_matches(p, rule.files))
            for p in _bash_paths(cmd)
        ):
            return "block", None
    return "allow", None


def _eval_existing_path_rule(
    rule: PathRule, call: ToolCall, preview: Preview | None
) -> tuple[str, Any]:
    """A deny rule on existing files only: an edit changes one by definition, a write only
    when its preview found the file; in a shell command, what rewrites or removes files."""
    if call.tool == "bash":
        cmd = bash_command(call)
        hit = _BASH_REWRITES.search(cmd) and any(
            path_matches(p, rule.globs) for p in _bash_paths(cmd)
        )
        return ("block", None) if hit else ("allow", None)
    path = call_path(call, preview)
    if call.tool not in rule.tools or path is None or not path_matches(path, rule.globs):
        return "allow", None
    if rule.files and not path_matches(path, rule.files):
        return "allow", None
    exists = call.tool != "write" or (preview is not None and preview.old_content is not None)
    return ("block", None) if exists else ("allow", None)


def _eval_command_rule(rule: CommandRule, call: ToolCall) -> tuple[str, Any]:
    if call.tool != "bash":
        return "allow", None
    cmd = str(call.arguments.get("cmd", ""))
    pattern = patterns.compiled(rule.pattern)
    hit = pattern.search(cmd) or any(pattern.search(seg) for seg in command_segments(cmd))
    if not hit:
        return "allow", None
    if rule.replace is None:
        return "block", None
    new_cmd = pattern.sub(rule.replace, cmd)
    if new_cmd == cmd:
        # Only a normalised segment matched (`npx tsc`, `FOO=1 npm test`): the raw
        # command cannot be rewritten in place, so the substitution's "never" holds.
        return "block", None
    return "rewrite", {**call.arguments, "cmd": new_cmd}


def _eval_content_rule(
    rule: ContentRule, call: ToolCall, preview: Preview | None
) -> tuple[str, Any]:
    if call.tool not in FILE_CHANGING_TOOLS:
        return "allow", None
    path = call_path(call, preview)
    if rule.path_globs and (path is None or not path_matches(path, rule.path_globs)):
        return "allow", None
    if rule.exclude_globs and path is not None and path_matches(path, rule.exclude_globs):
        return "allow", None
    pattern = patterns.compiled(rule.pattern, rule.ignore_case, multiline=True)
    if rule.required:
        whole = preview.new_content if preview is not None else None
        if whole is None and call.tool == "write":
            whole = str(call.arguments.get("content", ""))
        if whole is None:
            return "allow", None  # an edit without its preview: the file is not known
        return ("allow", None) if pattern.search(whole) else ("block", None)
    return ("block", None) if pattern.search(added_text(call, preview)) else ("allow", None)


def _eval_commit_message_rule(rule: CommitMessageRule, call: ToolCall) -> tuple[str, Any]:
    pattern = patterns.compiled(rule.pattern, rule.ignore_case)
    for msg in commit_messages(bash_command(call)) if call.tool == "bash" else []:
        if pattern.search(msg) != rule.must_match:
            return "block", None
    return "allow", None


def _eval_naming_rule(rule: NamingRule, call: ToolCall, preview: Preview | None) -> tuple[str, Any]:
    path = call_path(call, preview)
    new_file = call.tool == "write" and (preview is None or preview.old_content is None)
    if not new_file or path is None:
        return "allow", None
    if rule.path_globs and not path_matches(path, rule.path_globs):
        return "allow", None
    parts = path.replace("\\", "/").strip("/").split("/")
    names = [parts[-1].split(".")[0]] if rule.target == "file" else parts[:-1]
    style = re.compile(re.escape(rule.prefix) + _CASE_STYLES[rule.style])
    ok = all(style.fullmatch(n) for n in names if n and not n.startswith("."))
    return ("allow", None) if ok else ("block", None)


def _eval_size_rule(rule: SizeRule, call: ToolCall, preview: Preview | None) -> tuple[str, Any]:
    if call.tool not in FILE_CHANGING_TOOLS:
        return "allow", None
    path = call_path(call, preview)
    if rule.path_globs and (path is None or not path_matches(path, rule.path_globs)):
        return "allow", None
    content = preview.new_content if preview is not None else str(call.arguments.get("content", ""))
    if rule.max_lines is not None and len(content.splitlines()) > rule.max_lines:
        return "block", None
    if rule.max_bytes is not None and len(content.encode()) > rule.max_bytes:
        return "block", None
    return "allow", None


def removed_and_added(call: ToolCall, preview: Preview | None) -> tuple[list[str], list[str]]:
    """(removed, added) lines of a file change: from the preview's diff, else from an
    edit's own `old` / `new` (a write or edit_lines without a preview removes nothing known)."""
    if preview is not None and preview.diff:
        return changed_lines(preview.diff)
    if call.tool == "edit":
        return str(call.arguments.get("old", "")).split("\n"), str(
            call.arguments.get("new", "")
        ).split("\n")
    return [], added_text(call, preview).split("\n")


# A shell command that empties, rewrites or removes a file: `> f` (not `>> f`) names its
# target; `sed -i`, `truncate`, `rm` and `mv` rewrite or remove the files they name.
_BASH_TRUNCATE = re.compile(r"(?<![>&0-9])>(?!>)\s*(\S+)")
_BASH_REWRITES = re.compile(r"\bsed\s+-i|\btruncate\b|\brm\b|\bmv\b")


def _eval_keep_rule(rule: KeepRule, call: ToolCall, preview: Preview | None) -> tuple[str, Any]:
    if call.tool == "bash":
        if not rule.path_globs:
            return "allow", None
        cmd = bash_command(call)
        targets = [t.strip("'\"") for t in _BASH_TRUNCATE.findall(cmd)]
        if _BASH_REWRITES.search(cmd):
            targets += _bash_paths(cmd)
        blocked = any(path_matches(p, rule.path_globs) for p in targets)
        return ("block", None) if blocked else ("allow", None)
    if call.tool not in FILE_CHANGING_TOOLS:
        return "allow", None
    path = call_path(call, preview)
    if rule.path_globs and (path is None or not path_matches(path, rule.path_globs)):
        return "allow", None
    removed, added = removed_and_added(call, preview)
    kept = {line.strip() for line in added}
    lost = [r for r in removed if patterns.search(rule.pattern, r) and r.strip() not in kept]
    return ("block", None) if lost else ("allow", None)


def missing_first(
    rule: SequenceRule | ReadFirstRule, call: ToolCall, history: Sequence[ToolCall]
) -> str | None:
    """What must happen before `call` under a rule read on the task's history, or None."""
    if isinstance(rule, SequenceRule):
        if rule.before == "commit" and is_commit(call) and step_missing(rule, history):
            step = f"`{rule.step}`" if rule.runnable else rule.step
            return f"Run {step} first."
        return None
    unread = unread_paths(rule, history)
    if call.tool in FILE_CHANGING_TOOLS and unread:
        return f"Read `{unread[0]}` first."
    return None


def step_missing(rule: SequenceRule, history: Sequence[ToolCall]) -> bool:
    """A matching file changed after the last run of the rule's step."""
    last_change = last_step = -1
    for i, call in enumerate(history):
        if call.tool in FILE_CHANGING_TOOLS:
            path = call_path(call, None)
            if path is not None and (not rule.after_globs or path_matches(path, rule.after_globs)):
                last_change = i
        elif call.tool == "bash" and any(
            patterns.search(rule.command, seg) for seg in command_segments(bash_command(call))
        ):
            last_step = i
    return last_change > last_step


def unread_paths(rule: ReadFirstRule, history: Sequence[ToolCall]) -> list[str]:
    """The rule's files the task has not read yet."""
    read = [p for c in history if c.tool == "read" and (p := call_path(c, None)) is not None]
    return [p for p in rule.paths if not any(path_matches(r, [p]) for r in read)]


class GuardFailure(Exception):
    """A generated guard crashed, timed out or answered nonsense."""


def _eval_python_rule(rule: PythonRule, call: ToolCall, preview: Preview | None) -> tuple[str, Any]:
    result = run_guard_code(
        rule.code,
        {"call": call.model_dump(), "preview": None if preview is None else preview.model_dump()},
        timeout_s=PYTHON_GUARD_TIMEOUT_S,
    )
    if not result.ok:
        raise GuardFailure(result.error)
    answer = result.value
    if answer is None:
        return "allow", None
    if not isinstance(answer, dict) or answer.get("action") not in ("allow", "block", "rewrite"):
        raise GuardFailure(f"guard answered {answer!r}")
    if answer["action"] == "rewrite":
        args = answer.get("arguments")
        if not isinstance(args, dict):
            raise GuardFailure("rewrite without arguments")
        ToolCall(tool=call.tool, arguments=args).parsed()  # a rewrite must still be a valid call
        return "rewrite", args
    return answer["action"], None
