"""A call's preview (`calls.preview`): what makes a proposal not worth showing; and what a
bash run makes of the task's failing check (`calls.execute`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from continual_lsp.agent import calls
from continual_lsp.agent.agent import Agent
from continual_lsp.agent.calls import preview
from continual_lsp.agent.conversation import Conversation
from continual_lsp.agent.errors import Unparsable
from continual_lsp.agent.parts import Task
from continual_lsp.agent.proposal import Proposal
from continual_lsp.config import Settings
from continual_lsp.tools.base import ToolCall, ToolResult
from continual_lsp.tools.runner import ToolRunner
from continual_lsp.tools.sandbox import bwrap_available


def test_a_change_that_changes_nothing_is_not_shown(workspace: Path) -> None:
    tools = ToolRunner(workspace, Settings(enable_training=False))
    line = (workspace / "src/calc/ops.py").read_text().splitlines()[6]
    same = {"path": "src/calc/ops.py", "start": 7, "end": 7, "content": line}
    shown, error = preview(tools, ToolCall(tool="edit_lines", arguments=same))
    assert shown is None and error is not None and "as it is" in str(error)
    fixed = {**same, "content": line.replace("//", "/")}
    shown, error = preview(tools, ToolCall(tool="edit_lines", arguments=fixed))
    assert error is None and shown is not None and "-" + line in shown.diff


def test_a_change_that_breaks_the_parse_keeps_its_preview(workspace: Path) -> None:
    tools = ToolRunner(workspace, Settings(enable_training=False))
    broken = {"path": "src/calc/ops.py", "start": 7, "end": 7, "content": "    return ("}
    shown, error = preview(tools, ToolCall(tool="edit_lines", arguments=broken))
    assert isinstance(error, Unparsable) and shown is not None
    assert "not parsing" in str(error) and error.problem


@pytest.mark.parametrize(
    ("start", "end", "want"),
    [(4, 4, (4, 3)), (5, 5, (4, 3)), (2, 5, (2, 3)), (6, 9, None)],
    ids=["one-past", "two-past", "end-past", "made-up"],
)
def test_a_line_range_past_the_end_is_brought_within_the_file(
    tmp_path: Path, start: int, end: int, want: tuple[int, int] | None
) -> None:
    """The model's lines as written: a start just past the end appends, an end just
    past it stops at the last line; the reviewer is told the range was changed. A
    range well past the end is a made-up line number, and still cannot run."""
    (tmp_path / "t_test.py").write_text("a = 1\nb = 2\nc = 3\n")
    tools = ToolRunner(tmp_path, Settings(enable_training=False))
    args = {"path": "t_test.py", "start": start, "end": end, "content": "x = 1"}
    call = ToolCall(tool="edit_lines", arguments=args)
    shown, error = preview(tools, call)
    assert (
        shown is None and error is not None and "past the end of the file (3 lines)" in str(error)
    )
    fixed = calls.repaired(tools, call, shown, error)
    if want is None:
        assert fixed is None
        return
    assert fixed is not None
    variant, shown, note = fixed
    assert (variant.arguments["start"], variant.arguments["end"]) == want
    assert variant.arguments["content"] == "x = 1" and note == calls.CLAMPED
    assert shown.new_content.endswith("x = 1\n")


def test_a_model_write_that_drops_a_file_the_task_never_read_cannot_run(workspace: Path) -> None:
    """It would replace text the model has not seen (a rename became a two-line stub
    over the whole module); read first, it runs. A rewrite that keeps most lines, a new
    file, or a write the reviewer made (no `seen`) always can."""
    tools = ToolRunner(workspace, Settings(enable_training=False))
    ops = (workspace / "src/calc/ops.py").read_text()
    stub = ToolCall(
        tool="write", arguments={"path": "src/calc/ops.py", "content": "def f():\n    return\n"}
    )
    shown, error = preview(tools, stub, seen=set())
    assert shown is None and error is not None and "has not read: read it first" in str(error)
    shown, error = preview(tools, stub, seen={"src/calc/ops.py"})
    assert error is None and shown is not None
    shown, error = preview(tools, stub)
    assert error is None and shown is not None
    fixed = ops.replace("//", "/") + "\n\ndef twice(x):\n    return 2 * x\n"
    rewrite = ToolCall(tool="write", arguments={"path": "src/calc/ops.py", "content": fixed})
    shown, error = preview(tools, rewrite, seen=set())
    assert error is None and shown is not None
    new = ToolCall(tool="write", arguments={"path": "src/calc/new.py", "content": "x = 1\n"})
    shown, error = preview(tools, new, seen=set())
    assert error is None and shown is not None and shown.old_content is None


needs_node = pytest.mark.skipif(
    shutil.which("node") is None or not bwrap_available()[0],
    reason="node is not installed, or the bwrap sandbox cannot run here",
)

# The agent-skill draw's JavaScript project: `node --test` runs tests/*.test.js, and
# package.json keeps npm's placeholder test script.
JS_PROJECT = {
    "package.json": json.dumps(
        {"name": "calc", "scripts": {"test": 'echo "Error: no test specified" && exit 1'}}
    ),
    "src/math.js": "exports.add = (a, b) => a - b;\n",
    "tests/math.test.js": (
        "const test = require('node:test');\nconst assert = require('node:assert');\n"
        "const { add } = require('../src/math.js');\n"
        "test('adds', () => assert.strictEqual(add(2, 2), 4));\n"
    ),
}
FIXED = "exports.add = (a, b) => a + b;\n"


class _NoModel:
    """The sampler of an agent that only runs calls: sampling here is a test's mistake."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"sampled ({name}) in a test without a model")


def _ran(
    tmp_path: Path, cmd: str, files: dict[str, str] = JS_PROJECT, failing: str | None = None
) -> tuple[Task, ToolResult, Agent]:
    """`cmd` approved and run in a fresh task (its failing check `failing`) on a workspace
    of `files` in tmp_path/ws."""
    root = tmp_path / "ws"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    settings = Settings(
        enable_training=False,
        store_path=str(tmp_path / "store.sqlite3"),
        # The workspace's own tests run unapproved on a copy: only in the sandbox.
        sandbox="bwrap",
        allow_unsandboxed=False,
    )
    agent = Agent(settings, root, policy=_NoModel())  # type: ignore[arg-type]
    parts = agent._parts  # what the rooms get: `calls.execute` is the room under test
    text = "The tests fail: make them green again."
    task = Task(parts.store.create_task(text, str(root)), text, Conversation(text))
    task.failing_check = failing
    call = ToolCall(tool="bash", arguments={"cmd": cmd})
    pid = parts.store.add_proposal(task.id, 0, "bash", call.arguments, [], [], [], None, None)
    proposal = Proposal(id=pid, task_id=task.id, call=call, read_only=False)
    return task, calls.execute(parts, task, proposal, call), agent


NODE_TEST_NOTE = (
    "[no tests ran; this workspace's tests run with `node --test` (tests/math.test.js)]"
)


@needs_node
@pytest.mark.parametrize(
    "cmd", ["python3 -m pytest -q", "python3 -m pytest -q green again", "node:test", "npm test"]
)
def test_a_test_run_that_ran_none_gives_way_to_the_workspaces_failing_tests(
    tmp_path: Path, cmd: str
) -> None:
    """pytest in a JavaScript project (status 5, or 4 for words that name no path), no
    command at all (127), npm's placeholder script: changes are tried against
    `node --test`, found failing on a copy, and the model is told how this workspace runs
    its tests, and shown how they fail."""
    task, result, agent = _ran(tmp_path, cmd)
    assert not result.ok
    assert task.failing_check == "node --test"
    assert task.failing_files == ["src/math.js"]
    # The failure is shown, as run on the copy, with the workspace's paths in it.
    note = NODE_TEST_NOTE.removesuffix("]") + "; on a copy of the workspace it fails:]\n"
    assert note in result.output
    failure = result.output.split(note, 1)[1]
    assert "not ok 1" in failure and f"{tmp_path / 'ws' / 'tests' / 'math.test.js'}" in failure
    assert "continual-trial-" not in failure
    (_, seen) = task.conversation.calls[-1]
    assert seen.output == result.output
    (event,) = [e["payload"] for e in agent.store.events(kind="workspace_suite")]
    assert event["command"] == cmd and event["verdict"] == "fails"
    agent.close()


@needs_node
def test_the_workspaces_tests_passing_on_the_copy_stop_being_the_failing_check(
    tmp_path: Path,
) -> None:
    fixed = {**JS_PROJECT, "src/math.js": FIXED}
    task, result, agent = _ran(tmp_path, "python3 -m pytest -q", fixed, failing="node --test")
    assert task.failing_check is None and task.failing_files == []
    assert result.output.endswith(NODE_TEST_NOTE)
    (event,) = [e["payload"] for e in agent.store.events(kind="workspace_suite")]
    assert event["verdict"] == "passes"
    agent.close()


@needs_node
def test_a_run_of_the_workspaces_own_tests_is_the_check_as_before(tmp_path: Path) -> None:
    task, result, agent = _ran(tmp_path, "node --test")
    assert not result.ok and task.failing_check == "node --test"
    assert "no tests ran" not in result.output
    assert agent.store.events(kind="workspace_suite") == []
    agent.close()


def test_a_run_that_ran_no_test_where_the_workspace_has_none_is_the_check_as_before(
    tmp_path: Path,
) -> None:
    """Nothing else to run: the run is the failing check, as any failing test run is (a
    task may be to write the first test)."""
    task, result, agent = _ran(tmp_path, "python3 -m pytest -q", {"README.md": "calc\n"})
    assert not result.ok and task.failing_check == "python3 -m pytest -q"
    assert agent.store.events(kind="workspace_suite") == []
    agent.close()
