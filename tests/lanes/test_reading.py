"""The `Situation` a correction is routed with, as it is stored: a task-scoped item's
record and the `lane_situation` event keep the keys (and the omissions) the lanes wrote
when the situation was a plain dict, so stores written before read the same."""

from __future__ import annotations

import json

from continual_lsp.config import Settings
from continual_lsp.lanes.guards.guard_set import check_guards
from continual_lsp.lanes.reading import Situation
from continual_lsp.lanes.routing.allocator import route_correction
from continual_lsp.lanes.routing_ledger import promote
from continual_lsp.lanes.scope import TASK_KIND
from continual_lsp.tools.base import ToolCall
from tests.lanes.support import PRINCIPLE

# `spec["task"]["context"]` as the dict-based code stored it for a denied `npm install`:
# falsy values and the path a bash call has not are left out, only `cmd` of the arguments.
OLD_TASK_RECORD = {
    "tool": "bash",
    "task_text": "Add left-pad to the web app",
    "arguments": {"cmd": "npm install left-pad"},
}


def test_a_task_scoped_item_stores_what_the_dict_stored(store) -> None:
    denied = Situation(
        proposal_id="p1",
        task_text="Add left-pad to the web app",
        tool="bash",
        arguments={"cmd": "npm install left-pad"},
    )
    item = route_correction(store, "Just use pnpm for this one.", denied, denial=True)
    assert item is not None and item.kind == TASK_KIND
    stored = store.lane_item(item.id)["spec"]["task"]["context"]
    assert json.dumps(stored) == json.dumps(OLD_TASK_RECORD)


def test_a_write_keeps_its_path_and_not_its_content() -> None:
    write = Situation(
        task_text="",
        tool="write",
        arguments={"path": "calc.py", "content": "x = 1\n"},
        path="calc.py",
    )
    assert json.dumps(write.task_record()) == json.dumps({"tool": "write", "path": "calc.py"})


def test_an_old_task_record_reads_back_and_promotes_as_before(store) -> None:
    assert Situation.model_validate(OLD_TASK_RECORD).task_record() == OLD_TASK_RECORD
    item_id = store.add_lane_item(
        {
            "text": "Just use pnpm for this one.",
            "lane": "NONE",
            "reason": "Task-scoped.",
            "kind": TASK_KIND,
            "spec": {"task": {"cues": ["this one"], "context": OLD_TASK_RECORD}},
            "source": "p1",
        }
    )
    promoted = promote(store, item_id, Settings())
    # The stored npm call still makes "use pnpm" a rewrite of npm to pnpm.
    assert promoted.lane == "CODE"
    verdict = check_guards(store, ToolCall(tool="bash", arguments={"cmd": "npm test"}))
    assert verdict.rewritten_call is not None
    assert verdict.rewritten_call.arguments["cmd"] == "pnpm test"
    [event] = store.events(kind="lane_situation")
    assert event["payload"]["tool"] == "bash" and event["proposal_id"] is None
    assert event["payload"]["arguments"] == {"cmd": "npm install left-pad"}


def test_the_situation_event_is_what_the_dict_logged(store, embedder) -> None:
    edited = Situation(
        proposal_id="p7",
        task_text="Fix the typo in ops.py",
        tool="write",
        arguments={"path": "src/calc/ops.py", "content": "v0", "mode": None},
        path="src/calc/ops.py",
        demonstration=ToolCall(
            tool="edit_lines",
            arguments={"path": "src/calc/ops.py", "start": 1, "end": 1, "content": "v0"},
        ),
    )
    item = route_correction(store, PRINCIPLE, edited, Settings(), denial=True, embedder=embedder)
    assert item is not None
    [event] = store.events(kind="lane_situation")
    # The dict-based code's payload: ids first, then each key that was not None, in order.
    old = {
        "clusterId": item.cluster_id,
        "itemId": item.id,
        "task_text": "Fix the typo in ops.py",
        "tool": "write",
        "arguments": {"path": "src/calc/ops.py", "content": "v0", "mode": None},
        "demonstration": {
            "tool": "edit_lines",
            "arguments": {"path": "src/calc/ops.py", "start": 1, "end": 1, "content": "v0"},
        },
    }
    assert json.dumps(event["payload"]) == json.dumps(old)
    assert event["proposal_id"] == "p7"


def test_a_situation_with_neither_task_nor_tool_logs_nothing(store, embedder) -> None:
    bare = Situation(proposal_id="p8", path="src/calc/ops.py")
    assert route_correction(store, PRINCIPLE, bare, denial=True, embedder=embedder) is not None
    assert store.events(kind="lane_situation") == []
