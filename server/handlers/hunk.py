"""workspace/executeCommand `continual.hunk [proposalId, index, accept, reason?]`: one
hunk's verdict from a code action. Once every hunk has one, the proposal is decided with
them (a partial accept is an edit); until then the result is `{ok, pending: [index]}`."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pygls.exceptions import JsonRpcInvalidParams

from continual_lsp.protocol import HunkDecision

# A runtime import: pygls resolves command handlers' type hints to find their parameters.
from ..app import ContinualServer
from ..errors import RequestFailed
from ..hunks import HUNK
from .decide import decide_hunks


def register(ls: ContinualServer) -> None:
    @ls.command(HUNK)
    async def hunk(ls: ContinualServer, *args: Any) -> dict[str, Any]:
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
        proposal = await session.lookup(args[0])
        try:
            votes = session.hunk_votes.add(proposal, vote)
        except ValueError as exc:
            raise RequestFailed(str(exc)) from exc
        if votes is None:
            uri = session.proposal_uri(proposal)
            if uri is not None:
                session.publish(uri)  # the decided hunk's diagnostic goes away
            left = sorted(
                set(range(len(proposal.hunks()))) - session.hunk_votes.decided(proposal.id)
            )
            return {"ok": True, "pending": left}
        return await decide_hunks(ls, proposal.id, votes, None)
