"""continual/ledger {} → {items, contextTokens, notesOnlyTokens}: where each correction went."""

from __future__ import annotations

from typing import TYPE_CHECKING

from continual_lsp.protocol import METHOD_LEDGER, LedgerParams

from .agent_request import register_agent_request

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer


def register(ls: LanguageServer) -> None:
    register_agent_request(ls, METHOD_LEDGER, LedgerParams, lambda agent, _: agent.ledger())
