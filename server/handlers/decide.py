"""continual/decide {proposalId, decision, correction?, editedArguments?, hunks?} →
{ok, learned?, nextProposalId?}. Approve goes through workspace/applyEdit when the file
is open in the editor (see decisions.py). With `hunks`, the verdicts become the decision
first (all accepted: approve; none: deny; some: an edit holding the accepted ones)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from continual_lsp.protocol import METHOD_DECIDE, DecideParams, HunkDecision

from .. import decisions
from ..errors import validate
from ..proposals import lookup

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from ..connection import Connection


async def decide(ls: Connection, params: Any) -> dict[str, Any]:
    args = validate(DecideParams, METHOD_DECIDE, params)
    if args.hunks:
        return await decide_hunks(ls, args.proposal_id, args.hunks, args.correction)
    result = await decisions.decide(
        ls.session, args.proposal_id, args.decision, args.correction, args.edited_arguments
    )
    return result.dump()


async def decide_hunks(
    ls: Connection, proposal_id: str, hunks: list[HunkDecision], correction: str | None
) -> dict[str, Any]:
    proposal = await lookup(ls.session, proposal_id)
    agent = await ls.session.agent()
    decision, correction, edited = await ls.session.call(
        agent.resolve_hunks, proposal, hunks, correction
    )
    return (await decisions.decide(ls.session, proposal_id, decision, correction, edited)).dump()


def register(ls: LanguageServer) -> None:
    ls.feature(METHOD_DECIDE)(decide)
