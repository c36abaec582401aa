"""continual/ledger {} → {items, contextTokens, notesOnlyTokens}: where each correction went."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from continual_lsp.protocol import METHOD_LEDGER, LedgerParams

from ..errors import validate

if TYPE_CHECKING:
    from ..app import ContinualServer


async def ledger(ls: ContinualServer, params: Any) -> dict[str, Any]:
    validate(LedgerParams, METHOD_LEDGER, params)
    agent = await ls.session.agent()
    result = await ls.session.call(agent.ledger)
    return result.dump()


def register(ls: ContinualServer) -> None:
    ls.feature(METHOD_LEDGER)(ledger)
