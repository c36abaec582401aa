"""Agent events to the client: proposals, what was learned and routed, the end of a
task, and work-done progress (the model loading, a training step)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp

from continual_lsp.protocol import NOTIFY_LEARNED, NOTIFY_ROUTED, NOTIFY_TASK_DONE

from . import plain_client, proposals

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger(__name__)

PROGRESS_CREATE_S = 5.0


async def deliver(session: Session, kind: str, payload: Any) -> None:
    """One event from the pump (events.py), in order."""
    if kind == "proposal":
        if proposals.show(session, payload):
            plain_client.offer(session, payload)
    elif kind == "learned":
        session.ls.protocol.notify(NOTIFY_LEARNED, payload.dump())
    elif kind == "routed":
        session.ls.protocol.notify(NOTIFY_ROUTED, payload.dump())
    elif kind == "taskDone":
        for pid in session.state.of_task(payload.task_id):
            proposals.forget(session, pid)
        session.ls.protocol.notify(NOTIFY_TASK_DONE, payload.dump())
    elif kind == "progress":
        await _progress(session, *payload)


async def _progress(
    session: Session, token: str, title: str, message: str, percentage: int | None, done: bool
) -> None:
    if not session.state.capabilities.work_done_progress:
        return
    progress = session.ls.work_done_progress
    tokens = session.state.progress_tokens
    if token not in tokens:
        try:
            # Bounded: a client that never answers must not stall every later event.
            await asyncio.wait_for(progress.create_async(token), PROGRESS_CREATE_S)
        except Exception as exc:
            log.info("window/workDoneProgress/create failed: %s", exc)
            progress.tokens.pop(token, None)
            return
        tokens.add(token)
        progress.begin(
            token,
            lsp.WorkDoneProgressBegin(
                title=title, message=message or None, percentage=percentage, cancellable=False
            ),
        )
        if not done:
            return
    if done:
        progress.end(token, lsp.WorkDoneProgressEnd(message=message or None))
        tokens.discard(token)
        progress.tokens.pop(token, None)  # the agent may reuse the token later
    else:
        progress.report(
            token, lsp.WorkDoneProgressReport(message=message or None, percentage=percentage)
        )
