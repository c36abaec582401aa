"""continual/pending {} → {proposals}: what waits for the reviewer in this session, so a
client can resync after a reconnect or a lost notification without relying on timing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from continual_lsp.protocol import METHOD_PENDING, PendingParams, PendingResult

from ..errors import validate
from ..proposals import payload

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from ..connection import Connection


async def pending(ls: Connection, params: Any) -> dict[str, Any]:
    validate(PendingParams, METHOD_PENDING, params)
    session = ls.session
    agent = await session.agent()
    waiting = await session.call(agent.pending_proposals)
    return PendingResult(proposals=[payload(session, p) for p in waiting]).dump()


def register(ls: LanguageServer) -> None:
    ls.feature(METHOD_PENDING)(pending)
