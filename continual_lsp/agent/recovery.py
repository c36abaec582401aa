"""Crash recovery: what committed decisions started before a crash, finished on the next
start (the other half of the durability rule in `decide`)."""

from __future__ import annotations

from typing import Any

from continual_lsp.agent.parts import Parts
from continual_lsp.store import Store
from continual_lsp.tools.base import Preview, ToolCall, ToolError
from continual_lsp.tools.runner import ToolRunner


def recover(parts: Parts) -> None:
    """Finish what committed decisions started before a crash.

    File changes are re-applied only when the file still holds exactly the content
    the proposal was computed against; a bash call is never re-run blindly.
    """
    store, training = parts.store, parts.training
    for decision in store.pending_decisions():
        pid = decision["proposal_id"]
        row = store.proposal(pid)
        if row is None:
            continue
        outcome: dict[str, Any] = {"recovered": True}
        if decision["decision"] in ("deny", "edit") and not training.has_job(pid):
            call = None
            if decision["edited_arguments"]:
                args = dict(decision["edited_arguments"])
                call = ToolCall(tool=args.pop("tool", row["tool"]), arguments=args)
            training.enqueue_from_row(row, decision, call)
        if decision["decision"] in ("approve", "edit", "override"):
            outcome.update(_recover_execution(store, parts.tools, row, decision))
        store.mark_applied(pid, outcome)
    parts.checkpoints.recover()
    training.resume()


def _recover_execution(
    store: Store, tools: ToolRunner, row: dict[str, Any], decision: dict[str, Any]
) -> dict[str, Any]:
    args = decision["edited_arguments"] or {"tool": row["tool"], **row["arguments"]}
    args = dict(args)
    call = ToolCall(tool=args.pop("tool", row["tool"]), arguments=args)
    if call.tool == "bash":
        return {"ok": False, "output": "interrupted by a crash; bash is not re-run"}
    if call.tool == "done":
        store.set_task_status(row["task_id"], "done", str(call.arguments["summary"]))
        return {"ok": True, "output": "task finished"}
    if call.read_only:
        return {"ok": True, "output": "read-only call; nothing to recover"}
    if not row["preview"]:
        return {"ok": False, "output": "not applied after the crash: no preview to check"}
    # Whatever the reviewer approved or edited was computed against the file the
    # proposal's preview saw: it is replayed only onto exactly those bytes.
    proposed = Preview.model_validate(row["preview"])
    try:
        if decision["edited_arguments"]:
            if tools.target_path(call) != proposed.path:
                return {
                    "ok": False,
                    "output": "not applied after the crash: the edited "
                    "call changes another file, whose state at the decision is unknown",
                }
            tools.check_fresh(proposed)
            result = tools.execute(call)
        elif tools.already_applied(proposed):
            return {"ok": True, "output": "already applied before the crash"}
        else:
            result = tools.execute(call, preview=proposed)
        return result.model_dump()
    except ToolError as exc:
        return {"ok": False, "output": f"not applied after the crash: {exc}"}
