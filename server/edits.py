"""Turn a reviewer's edited file (or command) back into the arguments of one tool call.

*Edit proposal…* opens the proposed content as a file; saving it is the edit signal.
The saved text is converted to **the proposal's own tool** whenever that tool can
express it (an `edit_lines` proposal stays `edit_lines`, an `edit` stays `edit`), so the
demonstration SDPO learns from is in the form the model chose; when it cannot (a new
file, an `edit` whose replaced text is not unique), the call becomes a `write` of the
whole file, which the Agent accepts through the `tool` key of `editedArguments`.
"""

from __future__ import annotations

import json
from typing import Any

from .lsp_text import line_edit, split_lines


class EditError(ValueError):
    """The edited text cannot become a call; the message is meant for the reviewer."""


def edited_file_arguments(
    tool: str, arguments: dict[str, Any], old_content: str | None, edited: str
) -> dict[str, Any]:
    """editedArguments for a file-changing proposal whose result the reviewer rewrote."""
    path = arguments["path"]
    if old_content is not None and edited == old_content:
        raise EditError(
            f"the edited {path} is identical to the file on disk: deny the proposal instead"
        )
    whole = {"path": path, "content": edited}
    if old_content is None or not old_content or tool == "write":
        return whole if tool == "write" else {"tool": "write", **whole}
    if tool == "edit_lines":
        return _as_edit_lines(path, old_content, edited)
    if tool == "edit":
        as_edit = _as_edit(path, old_content, edited)
        return as_edit if as_edit is not None else {"tool": "write", **whole}
    return {"tool": "write", **whole}


def _as_edit_lines(path: str, old: str, edited: str) -> dict[str, Any]:
    old_lines = split_lines(old)
    change = line_edit(old, edited)
    start, end, content = change.start, change.old_end, change.text
    if end == start:
        # A pure insertion replaces no line, but edit_lines needs at least one: take in
        # the following line (or the preceding one at the end of the file) unchanged.
        if start < len(old_lines):
            content, end = content + old_lines[start], start + 1
        else:
            start, content = start - 1, old_lines[start - 1] + content
    return {"path": path, "start": start + 1, "end": end, "content": content}


def _as_edit(path: str, old: str, edited: str) -> dict[str, Any] | None:
    old_lines, new_lines = split_lines(old), split_lines(edited)
    change = line_edit(old, edited)
    start, old_end, new_end = change.start, change.old_end, change.new_end
    # `edit` needs a non-empty `old` that occurs exactly once: widen the window by whole
    # lines on both sides (the same lines in both texts) until it does.
    while True:
        before = "".join(old_lines[start:old_end])
        if before and old.count(before) == 1:
            return {"path": path, "old": before, "new": "".join(new_lines[start:new_end])}
        if start == 0 and old_end == len(old_lines):
            return None
        if start > 0:
            start -= 1
        if old_end < len(old_lines):
            old_end += 1
            new_end += 1


def edited_command_arguments(arguments: dict[str, Any], edited: str) -> dict[str, Any]:
    """A bash proposal is edited as a shell script: its text is the new `cmd`."""
    cmd = edited.strip()
    if not cmd:
        raise EditError("the edited command is empty: deny the proposal instead")
    if cmd == str(arguments.get("cmd", "")).strip():
        raise EditError("the command is unchanged: approve the proposal instead")
    return {**arguments, "cmd": cmd}


def edited_json_arguments(arguments: dict[str, Any], edited: str) -> dict[str, Any]:
    """Other calls are edited as their JSON arguments (a `tool` key may change the tool)."""
    try:
        value = json.loads(edited)
    except json.JSONDecodeError as exc:
        raise EditError(f"the edited arguments are not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise EditError("the edited arguments must be a JSON object")
    if value == arguments:
        raise EditError("the arguments are unchanged: approve the proposal instead")
    return value
