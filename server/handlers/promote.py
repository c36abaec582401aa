"""continual/promote {itemId} → {ok, itemId, lane, reason}: keep a task-scoped correction
as a standing rule (routed again through the lanes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from continual_lsp.protocol import METHOD_PROMOTE, PromoteParams

from .agent_request import register_agent_request

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer


def register(ls: LanguageServer) -> None:
    register_agent_request(
        ls, METHOD_PROMOTE, PromoteParams, lambda agent, args: agent.promote(args.item_id)
    )
