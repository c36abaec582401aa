"""continual/revert {itemId} → {ok}: undo a bullet, a guard or an adapter version."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from continual_lsp.protocol import METHOD_REVERT, OkResult, RevertParams

from ..errors import validate

if TYPE_CHECKING:
    from ..app import ContinualServer


async def revert(ls: ContinualServer, params: Any) -> dict[str, Any]:
    args = validate(RevertParams, METHOD_REVERT, params)
    agent = await ls.session.agent()
    await ls.session.call(agent.revert, args.item_id)
    return OkResult(ok=True).dump()


def register(ls: ContinualServer) -> None:
    ls.feature(METHOD_REVERT)(revert)
