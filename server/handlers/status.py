"""continual/status {} → {backend, model, adapterVersion, trainingSteps, queueDepth,
pendingProposalId?}. Answers while the model loads or trains: it needs the agent, not
its model, and runs on the thread pool like every agent call."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from continual_lsp.protocol import METHOD_STATUS, StatusParams

from ..errors import validate

if TYPE_CHECKING:
    from ..app import ContinualServer


async def status(ls: ContinualServer, params: Any) -> dict[str, Any]:
    validate(StatusParams, METHOD_STATUS, params)
    agent = await ls.session.agent()
    result = await ls.session.call(agent.status)
    return result.dump()


def register(ls: ContinualServer) -> None:
    ls.feature(METHOD_STATUS)(status)
