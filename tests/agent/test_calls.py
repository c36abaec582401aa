"""A call's preview (`calls.preview`): what makes a proposal not worth showing."""

from __future__ import annotations

from pathlib import Path

from continual_lsp.agent.calls import preview
from continual_lsp.agent.errors import Unparsable
from continual_lsp.config import Settings
from continual_lsp.tools.base import ToolCall
from continual_lsp.tools.runner import ToolRunner


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
