"""continual/allow {proposalId} → {ok, itemId, rule}: "always allow calls like this one",
an allow rule in the CODE lane (revert it from the ledger). Guards and deny rules still
run first. Also the command `continual.allow [proposalId]`."""

from __future__ import annotations

from typing import Any

from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from continual_lsp.protocol import METHOD_ALLOW, AllowParams

# A runtime import: pygls resolves command handlers' type hints to find their parameters.
from ..connection import Connection
from ..errors import validate

ALLOW = "continual.allow"


async def allow(ls: Connection, params: Any) -> dict[str, Any]:
    args = validate(AllowParams, METHOD_ALLOW, params)
    agent = await ls.session.ready_agent()
    return (await ls.session.call(agent.allow, args.proposal_id)).dump()


def register(ls: LanguageServer) -> None:
    ls.feature(METHOD_ALLOW)(allow)

    @ls.command(ALLOW)
    async def allow_command(ls: Connection, *args: Any) -> dict[str, Any]:
        if len(args) != 1 or not isinstance(args[0], str):
            raise JsonRpcInvalidParams(message=f"{ALLOW} expects [proposalId]")
        return await allow(ls, {"proposalId": args[0]})
