"""Allow rules against compound commands (issue 19): per segment, never past a guard."""

from __future__ import annotations

from typing import Any

import pytest

from continual_lsp.lanes import allow_rules
from continual_lsp.tools.base import Preview, ToolCall

WS = "/work/ws"


def bash(cmd: str) -> ToolCall:
    return ToolCall(tool="bash", arguments={"cmd": cmd})


def rule(store: Any, prefix: str, tool: str = "bash") -> str:
    return allow_rules.add_rule(
        store,
        allow_rules.AllowSpec(tool=tool, prefix=prefix, workspace=WS),
        "prop-x",
        learned=False,
    )


def test_a_rule_allows_its_prefix_after_a_cd_inside_the_workspace(store: Any) -> None:
    item = rule(store, "pytest -q")
    for cmd in ("pytest -q", "cd sub && pytest -q", "pytest -q tests/test_ops.py"):
        found = allow_rules.match(store, bash(cmd), None, WS)
        assert found is not None and found.item_id == item, cmd
    assert allow_rules.match(store, bash("pytest"), None, WS) is None
    assert allow_rules.match(store, bash("pytest -q"), None, "/other/ws") is None


@pytest.mark.parametrize(
    "cmd",
    [
        "pytest -q; curl https://example.com",
        "pytest -q && rm -rf ~",
        "git status | sh",
        "pytest -q $(curl evil)",
        "$(pytest -q)",
        "pytest -q `id`",
        "pytest -q > /etc/passwd",
        "pytest -q &",
        "sudo pytest -q",
        "PYTHONPATH=/ pytest -q",
        "cd / && pytest -q",
        "cd .. && pytest -q",
        "pytest -q ../../elsewhere",
        "pytest -q\ncurl x",
    ],
)
def test_compound_commands_are_never_allowed_by_a_prefix(store: Any, cmd: str) -> None:
    rule(store, "pytest -q")
    rule(store, "git status")
    assert allow_rules.match(store, bash(cmd), None, WS) is None


@pytest.mark.parametrize(
    "cmd",
    ["curl https://x", "git push", "pip install x", "rm -rf build", "sh -c 'pytest -q'",
     "python script.py", "pytest -q && pytest -q", "ls > out", "export PATH=.",
     "trap 'touch F' EXIT", "pushd sub", "set -e"],
)  # fmt: skip
def test_no_rule_can_be_made_for_the_network_destruction_or_a_shell(cmd: str) -> None:
    spec, why = allow_rules.call_class(bash(cmd), None, WS)
    assert spec is None and why


def test_the_class_of_a_command_is_its_prefix() -> None:
    spec, _ = allow_rules.call_class(bash("cd sub && pytest -q tests/test_ops.py"), None, WS)
    assert spec is not None and (spec.tool, spec.prefix) == ("bash", "pytest -q")
    spec, _ = allow_rules.call_class(bash("python -m pytest -x"), None, WS)
    assert spec is not None and (spec.prefix, spec.flags) == ("python -m pytest", ["-x"])
    spec, _ = allow_rules.call_class(bash("find . -type f -name '*.py' -newer a --max=1"), None, WS)
    assert spec is not None and (spec.prefix, spec.flags) == (
        "find",
        ["--max", "-name", "-newer", "-type"],
    )


def test_file_rules_cover_their_directory_only(store: Any) -> None:
    rule(store, "src/", tool="file")

    def edit(path: str) -> tuple[ToolCall, Preview]:
        call = ToolCall(tool="write", arguments={"path": path, "content": "x"})
        return call, Preview(path=path, old_content="", new_content="x", diff="", old_sha256=None)

    assert allow_rules.match(store, *edit("src/calc/ops.py"), WS) is not None
    assert allow_rules.match(store, *edit("setup.py"), WS) is None
    assert allow_rules.call_class(*edit(".git/config"), WS)[0] is None


def test_a_reverted_rule_allows_nothing(store: Any) -> None:
    item = rule(store, "git status")
    store.update_lane_item(item, active=False)
    assert allow_rules.match(store, bash("git status"), None, WS) is None


def test_the_same_class_is_one_rule(store: Any) -> None:
    assert rule(store, "pytest -q") == rule(store, "pytest -q")
