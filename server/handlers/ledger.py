"""continual/ledger {} → {items, contextTokens, notesOnlyTokens}: where each correction went."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from continual_lsp.protocol import METHOD_LEDGER, LedgerParams

from ..errors import validate

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from ..connection import Connection


async def ledger(ls: Connection, params: Any) -> dict[str, Any]:
    validate(LedgerParams, METHOD_LEDGER, params)
    agent = await ls.session.agent()
    result = await ls.session.call(agent.ledger)
    return result.dump()


def register(ls: LanguageServer) -> None:
    ls.feature(METHOD_LEDGER)(ledger)
