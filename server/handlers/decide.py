"""continual/decide {proposalId, decision, correction?, editedArguments?} →
{ok, learned?, nextProposalId?}. Approve goes through workspace/applyEdit when the file
is open in the editor (see decisions.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from continual_lsp.protocol import METHOD_DECIDE, DecideParams

from .. import decisions
from ..errors import validate

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from ..connection import Connection


async def decide(ls: Connection, params: Any) -> dict[str, Any]:
    args = validate(DecideParams, METHOD_DECIDE, params)
    result = await decisions.decide(
        ls.session, args.proposal_id, args.decision, args.correction, args.edited_arguments
    )
    return result.dump()


def register(ls: LanguageServer) -> None:
    ls.feature(METHOD_DECIDE)(decide)
