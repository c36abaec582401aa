"""continual/revert {itemId} → {ok}: undo a bullet, a guard or an adapter version."""

from __future__ import annotations

from typing import TYPE_CHECKING

from continual_lsp.protocol import METHOD_REVERT, RevertParams

from .agent_request import register_agent_request

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer


def register(ls: LanguageServer) -> None:
    register_agent_request(
        ls, METHOD_REVERT, RevertParams, lambda agent, args: agent.revert(args.item_id)
    )
