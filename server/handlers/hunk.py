"""workspace/executeCommand `continual.hunk [proposalId, index, accept, reason?]`: one
hunk's verdict from a code action. Once every hunk has one, the proposal is decided with
them (a partial accept is an edit); until then the result is `{ok, pending: [index]}`."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from continual_lsp.protocol import HunkDecision

# A runtime import: pygls resolves command handlers' type hints to find their parameters.
from ..connection import Connection
from ..errors import RequestFailed
from ..hunk_votes import HUNK
from ..proposals import lookup, proposal_uri, publish
from .decide import decide_hunks


def register(ls: LanguageServer) -> None:
    @ls.command(HUNK)
    async def hunk(ls: Connection, *args: Any) -> dict[str, Any]:
        usage = f"{HUNK} expects [proposalId, index, accept, reason?]"
        if not 3 <= len(args) <= 4 or not isinstance(args[0], str):
            raise JsonRpcInvalidParams(message=f"{usage}, got {list(args)!r}")
        try:
            vote = HunkDecision(
                index=args[1], accept=args[2], reason=args[3] if len(args) > 3 else None
            )
        except ValidationError as exc:
            raise JsonRpcInvalidParams(message=f"{usage}: {exc}") from exc
        session = ls.session
        proposal = await lookup(session, args[0])
        try:
            votes = session.state.hunk_votes.add(proposal, vote)
        except ValueError as exc:
            raise RequestFailed(str(exc)) from exc
        if votes is None:
            uri = proposal_uri(session, proposal)
            if uri is not None:
                publish(session, uri)  # the decided hunk's diagnostic goes away
            left = sorted(
                set(range(len(proposal.hunks()))) - session.state.hunk_votes.decided(proposal.id)
            )
            return {"ok": True, "pending": left}
        return await decide_hunks(ls, proposal.id, votes, None)
