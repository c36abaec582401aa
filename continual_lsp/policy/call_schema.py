"""The tool-call schema made decodable: what a constrained decoder is given.

`decoding_schema` is `tools.base.tool_call_schema()` without what only documents and
without `null` branches, its strings bounded, narrowed to the allowed tools and by the
guards' restrictions. The local backend compiles it into an llguidance grammar
(local/grammar.py); vLLM is given it as its guided-decoding schema.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from continual_lsp.policy.base import DecodeRestrictions
from continual_lsp.tools.base import (
    FILE_PATH_TOOLS,
    NEW_PATH_EXCLUDED,
    PATH_EXCLUDED,
    TOOL_NAMES,
    tool_call_schema,
)

# No whitespace between JSON tokens: the canonical form has none (render.call_text), and
# a small model given optional whitespace can loop on newlines until max_tokens.


def _strip_schema(node: Any) -> Any:
    """Drop what only documents (title, description, default) and `null` branches.

    An optional argument is expressed by leaving the key out, so `anyOf [X, null]` becomes
    `X`: the model cannot write `"offset":null`, and every decoded call is in the
    canonical form that `render.call_text` writes.
    """
    if isinstance(node, list):
        return [_strip_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        key: _strip_schema(value)
        for key, value in node.items()
        if key not in ("title", "description", "default")
    }
    branches = out.get("anyOf")
    if isinstance(branches, list):
        kept = [b for b in branches if b != {"type": "null"}]
        if len(kept) == 1:
            del out["anyOf"]
            out.update(kept[0])
        else:
            out["anyOf"] = kept
    return out


def check_tools(tools: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The allowed tools in canonical order (None = all eight answers, `done` too); ValueError if unknown/empty."""
    if tools is None:
        return TOOL_NAMES
    unknown = sorted(set(tools) - set(TOOL_NAMES))
    if unknown:
        raise ValueError(f"unknown tools {unknown}; the tools are {', '.join(TOOL_NAMES)}")
    if not tools:
        raise ValueError("the allowed tools list is empty: at least one tool is needed")
    return tuple(name for name in TOOL_NAMES if name in tools)


def not_prefixed_regex(prefixes: list[str], excluded: str = "") -> str:
    """An anchored regex for the strings that start with none of `prefixes` (and hold
    none of the `excluded` characters, a regex character-class body).

    A grammar has no negative lookahead, so the complement is spelled out over the trie
    of the prefixes: at each node a string may end, leave the trie on a character no
    prefix continues with, or follow a child that is not itself a forbidden prefix.
    """
    rest_class = f"[^{excluded}]" if excluded else r"[\s\S]"
    trie: dict[str, Any] = {}
    for prefix in prefixes:
        node = trie
        for char in prefix:
            node = node.setdefault(char, {})
        node[""] = {}  # a forbidden prefix ends here

    def below(node: dict[str, Any]) -> str | None:
        if "" in node:
            return None
        children = sorted(node)
        leave = "[^" + "".join(re.escape(c) for c in children) + excluded + "]"
        branches = ["", leave + rest_class + "*"]
        for char in children:
            rest = below(node[char])
            if rest is not None:
                branches.append(re.escape(char) + rest)
        return "(?:" + "|".join(branches) + ")"

    body = below(trie)
    return "^" + (body if body is not None else "[^\\s\\S]") + "$"


def decoding_schema(
    tools: list[str] | tuple[str, ...] | None = None, forbid: DecodeRestrictions | None = None
) -> dict[str, Any]:
    """The schema calls are decoded under: `tool_call_schema()` without null branches,
    restricted to `tools` (an allow-list, `SampleParams.tools`) when given, and narrowed
    by `forbid` (guards as grammar: a blocked tool is left out, a forbidden path or
    command prefix becomes a `pattern`; with a file list, the tools that need an
    existing file name one of those files, and are left out when there is none; with
    `write_paths`, write names one of them or a file under one of its folders). A
    restriction that would leave no tool at all is not applied to the tool list: the
    guards and the tools still refuse what is sampled."""
    allowed = check_tools(tools)
    schema: dict[str, Any] = _strip_schema(copy.deepcopy(tool_call_schema()))
    branches = [b for b in schema["oneOf"] if b["properties"]["tool"]["const"] in allowed]
    if forbid is not None:
        open_paths = [(b, _open_paths(b, forbid)) for b in branches]
        open_tools = [(b, paths) for b, paths in open_paths if paths is not None]
        branches = [b for b, _ in open_tools or open_paths]
        for branch, paths in open_tools or open_paths:
            tool = branch["properties"]["tool"]["const"]
            args = branch["properties"]["arguments"]["properties"]
            prefixes = [p for p in forbid.path_prefixes.get(tool, []) if p]
            if paths and any(path.endswith("/") for path in paths):
                args["path"]["pattern"] = _listed_regex(paths, NEW_PATH_EXCLUDED)
            elif paths:
                args["path"] = {"type": "string", "enum": paths}
            elif prefixes and "path" in args:
                excluded = NEW_PATH_EXCLUDED if tool == "write" else PATH_EXCLUDED
                args["path"]["pattern"] = not_prefixed_regex(prefixes, excluded)
            if tool == "bash" and forbid.command_prefixes and "cmd" in args:
                args["cmd"]["pattern"] = not_prefixed_regex(forbid.command_prefixes)
    schema["oneOf"] = branches
    return schema


def _listed_regex(paths: list[str], excluded: str) -> str:
    """An anchored regex for `paths`, where one that ends in "/" stands for any file
    name under that folder (a name without the `excluded` characters)."""
    body = "|".join(
        re.escape(path) + (f"[^/{excluded}][^{excluded}]*" if path.endswith("/") else "")
        for path in paths
    )
    return f"^(?:{body})$"


def _open_paths(branch: dict[str, Any], forbid: DecodeRestrictions) -> list[str] | None:
    """The files a tool's branch may name: [] when any path (no list for the tool: `files`
    for the tools that need an existing file, `write_paths` for write), None when none
    at all (the tool is blocked, or every listed path is under a blocked prefix)."""
    tool = branch["properties"]["tool"]["const"]
    prefixes = forbid.path_prefixes.get(tool, [])
    if "" in prefixes:
        return None
    if tool == "write" and forbid.write_paths is not None:
        listed = forbid.write_paths
    elif tool in FILE_PATH_TOOLS and forbid.files is not None:
        listed = forbid.files
    else:
        return []
    limit = branch["properties"]["arguments"]["properties"]["path"].get("maxLength", 200)
    paths = [f for f in listed if len(f) <= limit and not any(f.startswith(p) for p in prefixes)]
    return paths or None
