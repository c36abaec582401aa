"""continual/decide {proposalId, decision, correction?, editedArguments?} →
{ok, learned?, nextProposalId?}. Approve goes through workspace/applyEdit when the file
is open in the editor (see Session._approve)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from continual_lsp.protocol import METHOD_DECIDE, DecideParams

from ..errors import validate

if TYPE_CHECKING:
    from ..app import ContinualServer


async def decide(ls: ContinualServer, params: Any) -> dict[str, Any]:
    args = validate(DecideParams, METHOD_DECIDE, params)
    result = await ls.session.decide(
        args.proposal_id, args.decision, args.correction, args.edited_arguments
    )
    return result.dump()


def register(ls: ContinualServer) -> None:
    ls.feature(METHOD_DECIDE)(decide)
