"""The facade's reading of guards as grammar restrictions (no model)."""

from __future__ import annotations

from typing import Any

from continual_lsp.agent.lanes_facade import LanesFacade
from continual_lsp.config import Settings
from continual_lsp.lanes.compile import _command_pattern
from continual_lsp.lanes.shapes import program_pattern
from continual_lsp.tools.base import ToolCall


def _guard(store: Any, rules: list[dict[str, Any]]) -> None:
    store.add_lane_item(
        {
            "text": "a rule",
            "lane": "CODE",
            "reason": "test",
            "spec": {"message": "no", "rules": rules},
        }
    )


def test_guards_become_decode_restrictions(store: Any) -> None:
    _guard(store, [{"kind": "tool", "deny": ["write"]}])
    _guard(store, [{"kind": "tool", "deny": ["edit"], "existing_files_only": True}])
    _guard(store, [{"kind": "path", "globs": ["vendor/**", "*.lock"], "tools": ["edit_lines"]}])
    _guard(store, [{"kind": "path", "globs": ["src/"], "mode": "allow"}])
    _guard(store, [{"kind": "command", "pattern": _command_pattern("git push")}])
    # A rewrite stays a rewrite: never a grammar restriction.
    _guard(store, [{"kind": "command", "pattern": program_pattern("npm"), "replace": "pnpm"}])
    _guard(store, [{"kind": "command", "pattern": r"(?i)curl .*\| sh"}])
    got = LanesFacade(store, Settings(), len).decode_restrictions()
    assert got.path_prefixes == {"edit_lines": ["vendor/"], "write": [""]}
    assert got.command_prefixes == ["git push "]


def test_no_guards_no_restrictions(store: Any) -> None:
    got = LanesFacade(store, Settings(), len).decode_restrictions()
    assert got.path_prefixes == {} and got.command_prefixes == []


PYTEST_AFTER_SRC = {
    "kind": "sequence",
    "command": r"\bpytest\b",
    "step": "pytest -q",
    "after_globs": ["src/**"],
}


def test_sequence_guards_read_the_tasks_history(store: Any) -> None:
    _guard(store, [PYTEST_AFTER_SRC])
    facade = LanesFacade(store, Settings(), len)
    commit = ToolCall(tool="bash", arguments={"cmd": "git commit -m 'fix mean'"})
    change = ToolCall(tool="write", arguments={"path": "src/calc/ops.py", "content": "x = 1\n"})
    test = ToolCall(tool="bash", arguments={"cmd": "pytest -q"})
    assert facade.check_guards(commit, None, [change]).action == "block"
    assert facade.check_guards(commit, None, [change, test]).action == "allow"


def test_a_missing_step_is_due_before_a_commit_or_the_end(store: Any) -> None:
    _guard(store, [PYTEST_AFTER_SRC])
    facade = LanesFacade(store, Settings(), len)
    commit = ToolCall(tool="bash", arguments={"cmd": "cd repo && git commit -m 'fix mean'"})
    other = ToolCall(tool="bash", arguments={"cmd": "ls"})
    change = ToolCall(tool="write", arguments={"path": "src/calc/ops.py", "content": "x = 1\n"})
    docs = ToolCall(tool="write", arguments={"path": "README.md", "content": "x\n"})
    test = ToolCall(tool="bash", arguments={"cmd": "pytest -q"})
    assert facade.due_step([change], commit) == "pytest -q"
    assert facade.due_step([change], None) == "pytest -q"  # the task would finish
    assert facade.due_step([change], other) is None  # not a commit: nothing to answer
    assert facade.due_step([change, test], None) is None
    assert facade.due_step([test, change], commit) == "pytest -q"  # changed after the run
    assert facade.due_step([docs], None) is None  # outside the rule's files


def test_a_hash_inside_a_word_hides_nothing_from_the_allow_rules(store: Any) -> None:
    """Issue 32, finding 1: shlex read `x#; touch F` as a comment, so the rule for
    `git status` approved the whole line and `touch F` ran unasked."""
    facade = LanesFacade(store, Settings(), len)
    for cmd in ("git status", "pytest -q"):
        facade.add_allow_rule(ToolCall(tool="bash", arguments={"cmd": cmd}), None, "/ws", "p", True)
    for cmd in ("git status x#", "git status # a comment; touch F", "pytest -q x"):
        assert facade.allow_match(ToolCall(tool="bash", arguments={"cmd": cmd}), None, "/ws"), cmd
    for cmd in ("git status x#; touch F", "git status .#; rm -rf src", "pytest -q x#||touch F"):
        call = ToolCall(tool="bash", arguments={"cmd": cmd})
        assert facade.allow_match(call, None, "/ws") is None, cmd


def test_an_allow_rule_names_the_options_it_was_learned_with(store: Any) -> None:
    """Issue 32, finding 6: a rule learned from `find . -name …` was the prefix `find`,
    so it allowed `find … -delete` and `find . -exec …`."""
    facade = LanesFacade(store, Settings(), len)

    def bash(cmd: str) -> ToolCall:
        return ToolCall(tool="bash", arguments={"cmd": cmd})

    _, summary = facade.add_allow_rule(bash("find . -name '*.py'"), None, "/ws", "p", True)
    assert summary == "bash: `find …`, options -name only"
    facade.add_allow_rule(bash("sed -n 1,5p notes.txt"), None, "/ws", "p", True)
    facade.add_allow_rule(bash("git log --oneline -n 5"), None, "/ws", "p", True)
    for cmd in ("find src -name '*.txt'", "find .", "sed -n 1,5p a.txt", "git log --oneline"):
        assert facade.allow_match(bash(cmd), None, "/ws") is not None, cmd
    for cmd in (
        "find . -name x -delete",
        "find . -delete",
        "find . -name x -exec rm {} \\;",
        "find . -name x -execdir sh -c id \\;",
        "find . -name x -fprint out",
        "sed -i 1,5p a.txt",
        "sed -n 1,5p -i a.txt",
        "sed -ni 1p a.txt",
        "git log --oneline --output=log.txt",
        "git log --oneline --ext-diff -p",
    ):
        assert facade.allow_match(bash(cmd), None, "/ws") is None, cmd
