"""The tools of a turn's last tries after two repeats (`sampling._last_tries`)."""

from __future__ import annotations

from continual_lsp.agent.conversation import Conversation
from continual_lsp.agent.parts import Task
from continual_lsp.agent.sampling import _last_tries
from continual_lsp.tools.base import ToolCall


def _task(*calls: ToolCall) -> Task:
    task = Task("t1", "fix it", Conversation("fix it"))
    task.history.extend(calls)
    return task


def test_after_only_looks_the_last_try_must_act() -> None:
    looked = _task(ToolCall(tool="read", arguments={"path": "a.py"}))
    tools = _last_tries(looked, ["read", "edit_lines", "bash", "done"])
    assert tools == [["edit_lines", "bash"]]


def test_after_acting_the_last_try_may_only_be_done_when_done_is_allowed() -> None:
    acted = _task(ToolCall(tool="bash", arguments={"cmd": "pytest -q"}))
    assert _last_tries(acted, ["read", "bash", "done"]) == [["done"]]
    assert _last_tries(acted, ["read", "bash"]) == [["read", "bash"]]


def test_after_a_failing_test_run_the_last_try_must_change_a_file() -> None:
    """Not `done` first: the task's own check says it is not; `done` when the change
    repeats one already run too."""
    failed = _task(ToolCall(tool="bash", arguments={"cmd": "pytest -q"}))
    failed.failing_test = "pytest -q"
    assert _last_tries(failed, ["read", "edit", "bash", "done"]) == [["edit"], ["done"]]
    assert _last_tries(failed, None) == [["write", "edit", "edit_lines"], ["done"]]
    assert _last_tries(failed, ["read", "edit", "bash"]) == [["edit"]]
    # nothing that changes a file is allowed: done, as after any act
    assert _last_tries(failed, ["read", "bash", "done"]) == [["done"]]
