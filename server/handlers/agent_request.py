"""A request the Agent answers by itself: validate the params, make one Agent call on the
thread pool, answer with its result (or `{ok: true}` when it returns nothing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from continual_lsp.protocol import OkResult, Wire

from ..errors import validate

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from continual_lsp.agent.agent import Agent

    from ..connection import Connection

P = TypeVar("P", bound=BaseModel)


def register_agent_request(
    ls: LanguageServer,
    method: str,
    params_model: type[P],
    call: Callable[[Agent, P], Wire | None],
) -> None:
    async def handler(ls: Connection, params: Any) -> dict[str, Any]:
        args = validate(params_model, method, params)
        session = ls.session
        agent = await session.agent()
        result = await session.call(call, agent, args)
        return (OkResult(ok=True) if result is None else result).dump()

    ls.feature(method)(handler)
