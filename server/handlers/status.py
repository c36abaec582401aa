"""continual/status {} → {backend, model, adapterVersion, trainingSteps, queueDepth,
pendingProposalId?}. Answers while the model loads, trains or samples: it needs the
agent, not its model, and runs on the event loop itself. Its reads use the store's
reader connection, which never waits on a writer; a hop to the thread pool would wait
for the GIL twice behind the sampler (p99 goal ≤ 20 ms, bench/lsp_latency.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from continual_lsp.protocol import METHOD_STATUS, StatusParams

from ..errors import agent_error, validate

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from ..connection import Connection


async def status(ls: Connection, params: Any) -> dict[str, Any]:
    validate(StatusParams, METHOD_STATUS, params)
    agent = await ls.session.agent()
    try:
        result = agent.status()
    except Exception as exc:
        raise agent_error(exc) from exc
    return result.dump()


def register(ls: LanguageServer) -> None:
    ls.feature(METHOD_STATUS)(status)
