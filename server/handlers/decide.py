"""continual/decide {proposalId, decision, correction?, editedArguments?, hunks?} →
{ok, learned?, nextProposalId?}. Approve goes through workspace/applyEdit when the file
is open in the editor (see Session._approve). With `hunks`, the verdicts become the
decision first (all accepted: approve; none: deny; some: an edit holding them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from continual_lsp.protocol import METHOD_DECIDE, DecideParams, HunkDecision

from ..errors import validate

if TYPE_CHECKING:
    from ..app import ContinualServer


async def decide(ls: ContinualServer, params: Any) -> dict[str, Any]:
    args = validate(DecideParams, METHOD_DECIDE, params)
    if args.hunks:
        return await decide_hunks(ls, args.proposal_id, args.hunks, args.correction)
    result = await ls.session.decide(
        args.proposal_id, args.decision, args.correction, args.edited_arguments
    )
    return result.dump()


async def decide_hunks(
    ls: ContinualServer, proposal_id: str, hunks: list[HunkDecision], correction: str | None
) -> dict[str, Any]:
    proposal = await ls.session.lookup(proposal_id)
    agent = await ls.session.agent()
    decision, correction, edited = await ls.session.call(
        agent.resolve_hunks, proposal, hunks, correction
    )
    return (await ls.session.decide(proposal_id, decision, correction, edited)).dump()


def register(ls: ContinualServer) -> None:
    ls.feature(METHOD_DECIDE)(decide)
