"""The tools of a turn's last try after two repeats (`sampling._last_try_tools`)."""

from __future__ import annotations

from continual_lsp.agent.conversation import Conversation
from continual_lsp.agent.parts import Task
from continual_lsp.agent.sampling import _last_try_tools
from continual_lsp.tools.base import ToolCall


def _task(*calls: ToolCall) -> Task:
    task = Task("t1", "fix it", Conversation("fix it"))
    task.history.extend(calls)
    return task


def test_after_only_looks_the_last_try_must_act() -> None:
    looked = _task(ToolCall(tool="read", arguments={"path": "a.py"}))
    tools = _last_try_tools(looked, ["read", "edit_lines", "bash", "done"])
    assert tools == ["edit_lines", "bash"]


def test_after_acting_the_last_try_may_only_be_done_when_done_is_allowed() -> None:
    acted = _task(ToolCall(tool="bash", arguments={"cmd": "pytest -q"}))
    assert _last_try_tools(acted, ["read", "bash", "done"]) == ["done"]
    assert _last_try_tools(acted, ["read", "bash"]) == ["read", "bash"]
