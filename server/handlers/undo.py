"""continual/undo {proposalId?, reason?} → {ok, proposalId, restored}: put back what an
applied change replaced (the latest when no id), from its checkpoint; refused, naming the
file, when a file changed since. An undo is a late denial (the reason trains and routes).
Open buffers of restored files are brought along. Also the command
`continual.undo [proposalId?, reason?]` for plain LSP clients."""

from __future__ import annotations

import contextlib
from typing import Any

from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from continual_lsp.protocol import METHOD_UNDO, UndoParams

# A runtime import: pygls resolves command handlers' type hints to find their parameters.
from ..connection import Connection
from ..documents import normalize_uri
from ..errors import RequestFailed, validate

UNDO = "continual.undo"


async def undo(ls: Connection, params: Any) -> dict[str, Any]:
    args = validate(UndoParams, METHOD_UNDO, params)
    session = ls.session
    agent = await session.ready_agent()
    result = await session.call(agent.undo, args.proposal_id, args.reason)
    if session.workspace is not None:
        for rel in result.restored:
            path = session.workspace / rel
            uri = normalize_uri(path.as_uri())
            buffer = session.documents.text(uri)
            if buffer is None:
                continue
            text = path.read_text(encoding="utf-8") if path.exists() else ""
            if buffer != text:
                # Unversioned: the buffer may hold the change's text or already the disk's.
                with contextlib.suppress(RequestFailed):
                    await session.documents.apply(
                        uri, buffer, text, f"Undo {result.proposal_id}", versioned=False
                    )
    return result.dump()


def register(ls: LanguageServer) -> None:
    ls.feature(METHOD_UNDO)(undo)

    @ls.command(UNDO)
    async def undo_command(ls: Connection, *args: Any) -> dict[str, Any]:
        if len(args) > 2 or any(a is not None and not isinstance(a, str) for a in args):
            raise JsonRpcInvalidParams(message=f"{UNDO} expects [proposalId?, reason?]")
        params = {
            "proposalId": args[0] if args else None,
            "reason": args[1] if len(args) > 1 else None,
        }
        return await undo(ls, {k: v for k, v in params.items() if v})
