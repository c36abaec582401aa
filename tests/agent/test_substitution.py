"""The literal swaps a correction spells out, and how they apply to a call."""

from __future__ import annotations

import pytest

from continual_lsp.agent.substitution import (
    apply,
    apply_in_place,
    at_a_line,
    named_calls,
    named_paths,
    named_tools,
    substitutions,
)
from continual_lsp.tools.base import ToolCall


@pytest.mark.parametrize(
    ("correction", "pairs"),
    [
        ("That is not the bug: use / instead of //.", [("//", "/")]),
        ("Use logger.info instead of print here", [("print", "logger.info")]),
        ("replace `== None` with `is None`", [("== None", "is None")]),
        ("Please change 60 to 5.", [("60", "5")]),
        ("npm -> pnpm", [("npm", "pnpm")]),
        ("`const`, not `let`", [("let", "const")]),
        ("Use pnpm rather than npm; and replace npm with pnpm", [("npm", "pnpm")]),
    ],
)
def test_a_correction_names_its_swaps(correction: str, pairs: list[tuple[str, str]]) -> None:
    assert substitutions(correction) == pairs


@pytest.mark.parametrize(
    "correction",
    [
        "Use it instead of that.",  # prose, not literals
        "Change only line 7, not 6.",  # unquoted "X, not Y" would swap numbers
        "Use the logger instead of print.",  # two words before "instead of"
        "Don't touch the tests.",
    ],
)
def test_prose_names_no_swap(correction: str) -> None:
    assert substitutions(correction) == []


def test_a_swap_changes_only_the_text_the_call_writes() -> None:
    edit = ToolCall(tool="edit", arguments={"path": "a.py", "old": "x // 2", "new": "y = x // 2"})
    swapped = apply(edit, [("//", "/")])
    assert swapped is not None
    assert swapped.arguments == {"path": "a.py", "old": "x // 2", "new": "y = x / 2"}
    bash = ToolCall(tool="bash", arguments={"cmd": "npm install left-pad"})
    assert apply(bash, [("npm", "pnpm")]) == ToolCall(
        tool="bash", arguments={"cmd": "pnpm install left-pad"}
    )


def test_no_occurrence_no_variant() -> None:
    write = ToolCall(tool="write", arguments={"path": "a.py", "content": "print(1)\n"})
    assert apply(write, [("//", "/")]) is None
    read = ToolCall(tool="read", arguments={"path": "a.py"})
    assert apply(read, [("a", "b")]) is None


def test_a_swap_in_place_rewrites_what_the_call_replaces() -> None:
    """The model's place, the reviewer's words: an edit_lines call gets its range's
    current text swapped, an edit its `old`; nothing to swap there, no variant."""
    lines = ToolCall(
        tool="edit_lines", arguments={"path": "a.py", "start": 7, "end": 7, "content": "junk"}
    )
    swapped = apply_in_place(lines, [("//", "/")], "    return a // b")
    assert swapped is not None and swapped.arguments["content"] == "    return a / b"
    assert swapped.arguments["start"] == 7 and swapped.arguments["path"] == "a.py"
    assert apply_in_place(lines, [("//", "/")], "    return a + b") is None
    assert apply_in_place(lines, [("//", "/")], None) is None
    edit = ToolCall(tool="edit", arguments={"path": "a.py", "old": "a // b", "new": "junk"})
    swapped = apply_in_place(edit, [("//", "/")], None)
    assert swapped is not None and swapped.arguments == {
        "path": "a.py",
        "old": "a // b",
        "new": "a / b",
    }
    bash = ToolCall(tool="bash", arguments={"cmd": "npm i"})
    assert apply_in_place(bash, [("npm", "pnpm")], "npm i") is None


def test_an_insertion_is_swapped_on_the_line_it_goes_before() -> None:
    """The retrained starter answers "change line 7: use / instead of //" by inserting
    before line 7; the in-place variant replaces line 7 itself, swapped."""
    insert = ToolCall(
        tool="edit_lines",
        arguments={"path": "a.py", "start": 7, "end": 6, "content": "    return result"},
    )
    anchored = at_a_line(insert)
    assert anchored.arguments == {
        "path": "a.py",
        "start": 7,
        "end": 7,
        "content": "    return result",
    }
    swapped = apply_in_place(anchored, [("//", "/")], "    return a // b")
    assert swapped is not None
    assert swapped.arguments == {
        "path": "a.py",
        "start": 7,
        "end": 7,
        "content": "    return a / b",
    }
    replace = ToolCall(
        tool="edit_lines", arguments={"path": "a.py", "start": 7, "end": 7, "content": "x"}
    )
    assert at_a_line(replace) is replace
    edit = ToolCall(tool="edit", arguments={"path": "a.py", "old": "a", "new": "b"})
    assert at_a_line(edit) is edit


@pytest.mark.parametrize(
    ("correction", "cmds"),
    [
        ("Wrong runner: run it as `npx jest --ci`.", ["npx jest --ci"]),
        ("Use `yarn add left-pad`, not `npm install left-pad`.", ["yarn add left-pad"]),
        ("`npm ci` or `npm test` both work", ["npm ci", "npm test"]),
        ("Put `pnpm exec` in front of it.", []),  # a prefix, not a command of its own
    ],
)
def test_a_correction_names_the_command_to_run_instead(correction: str, cmds: list[str]) -> None:
    """A command about the same thing (a word in common with the denied one)."""
    denied = ToolCall(tool="bash", arguments={"cmd": "npm run jest left-pad"})
    assert [c.arguments["cmd"] for c in named_calls(correction, denied)] == cmds


@pytest.mark.parametrize(
    "correction",
    [
        "`yarn`, not `npm`",  # names, not commands
        "never `npm install` here",  # the call not to make
        "Messages look like `feat(api): ...`.",  # a pattern with a placeholder
        "Use `npm install left-pad` next time.",  # the denied call itself
    ],
)
def test_no_command_is_named(correction: str) -> None:
    denied = ToolCall(tool="bash", arguments={"cmd": "npm install left-pad"})
    assert named_calls(correction, denied) == []


@pytest.mark.parametrize(
    ("correction", "tools"),
    [
        ("Send the whole file with write.", ["write"]),
        ("do it with `edit_lines`, then use grep", ["edit_lines", "grep"]),
        ("Use the read tool first.", ["read"]),
        ("Don't use edit here; not with bash either", []),
        ("Use the logger, not print; write a test too", []),  # verbs and words, not tools
    ],
)
def test_a_correction_names_the_tool_to_use(correction: str, tools: list[str]) -> None:
    assert named_tools(correction) == tools


def test_a_correction_names_where_the_written_file_goes() -> None:
    denied = ToolCall(tool="write", arguments={"path": "helpers.py", "content": "X = 1\n"})
    moved = named_calls("Helpers live in lib/util/helpers.py, not at the top level.", denied)
    assert moved == [
        ToolCall(tool="write", arguments={"path": "lib/util/helpers.py", "content": "X = 1\n"})
    ]
    # Only a write moves: an edit's text belongs to the file it edits.
    edit = ToolCall(tool="edit", arguments={"path": "helpers.py", "old": "X", "new": "Y"})
    assert named_calls("Helpers live in lib/util/helpers.py.", edit) == []
    assert named_calls("Not in `lib/old/helpers.py`.", denied) == []


def test_the_paths_a_correction_names_to_work_on() -> None:
    said = "Don't put it in scripts/io.py; that goes into `pkg/core/io.py`, then pkg/core/io.py."
    assert named_paths(said) == ["pkg/core/io.py", "pkg/core/io.py"]
    assert named_paths("Never touch build/out.js, change lib/out.js") == ["lib/out.js"]
    assert named_paths("Fix the import.") == []
    assert named_paths("Don't edit vendor/; new code goes under src/app/.") == ["src/app/"]
    assert named_paths("As documented at https://example.org/docs/ page") == []


def test_a_write_moves_into_the_folder_a_correction_names() -> None:
    denied = ToolCall(tool="write", arguments={"path": "units.py", "content": "X = 1\n"})
    moved = named_calls("Modules live under lib/core/, not at the root.", denied)
    assert moved == [
        ToolCall(tool="write", arguments={"path": "lib/core/units.py", "content": "X = 1\n"})
    ]
