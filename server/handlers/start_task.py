"""continual/startTask {text, files?} → {taskId, proposal?}. The first proposal is in the result
and also follows as a `continual/proposal` notification: a client that processes the
response first (or loses the notification) still has it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from continual_lsp.protocol import METHOD_START_TASK, StartTaskParams, StartTaskResult

from ..errors import validate
from ..proposals import payload

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from ..connection import Connection


async def start_task(ls: Connection, params: Any) -> dict[str, Any]:
    args = validate(StartTaskParams, METHOD_START_TASK, params)
    session = ls.session
    agent = await session.ready_agent()
    with session.events.holding():
        task_id, proposal = await session.call(agent.start_task, args.text, args.files)
        if proposal is not None:
            session.events.announce("proposal", proposal)
    first = payload(session, proposal) if proposal is not None else None
    return StartTaskResult(task_id=task_id, proposal=first).dump()


def register(ls: LanguageServer) -> None:
    ls.feature(METHOD_START_TASK)(start_task)
