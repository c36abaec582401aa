"""continual/revert {itemId} → {ok}: undo a bullet, a guard or an adapter version."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from continual_lsp.protocol import METHOD_REVERT, OkResult, RevertParams

from ..errors import validate

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from ..connection import Connection


async def revert(ls: Connection, params: Any) -> dict[str, Any]:
    args = validate(RevertParams, METHOD_REVERT, params)
    agent = await ls.session.agent()
    await ls.session.call(agent.revert, args.item_id)
    return OkResult(ok=True).dump()


def register(ls: LanguageServer) -> None:
    ls.feature(METHOD_REVERT)(revert)
