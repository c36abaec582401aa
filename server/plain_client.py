"""Clients that know nothing of `continual/proposal` (no `continualProposals` capability):
a file proposal is revealed in the editor, where its diagnostic carries the code actions;
any other call that needs a decision is offered through window/showMessageRequest."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException
from pygls.uris import to_fs_path

from . import decisions, proposals, reviewer_files
from .lsp_text import proposal_message

if TYPE_CHECKING:
    from continual_lsp.agent.proposal import Proposal

    from .session import Session

log = logging.getLogger(__name__)

APPROVE, DENY, EDIT, OVERRIDE = "Approve", "Deny…", "Edit…", "Override guard"
FINISH = "Finish task"  # Approve, for the model's `done`: approving ends the task


def offer(session: Session, proposal: Proposal) -> None:
    """After a proposal is shown: what a plain client needs to see it."""
    if session.state.capabilities.renders_proposals:
        return
    uri = proposals.proposal_uri(session, proposal)
    if uri is not None:
        if not session.documents.is_open(uri):
            session.spawn(_reveal(session, uri, proposal))
    elif not proposal.read_only:
        session.spawn(_ask(session, proposal))


async def _reveal(session: Session, uri: str, proposal: Proposal) -> None:
    if not session.state.capabilities.show_document:
        return
    rng = None
    changed = proposals.payload(session, proposal).range
    if changed is not None:
        pos = lsp.Position(line=changed.start.line, character=0)
        rng = lsp.Range(start=pos, end=pos)
    await reviewer_files.show_document(session, uri, Path(to_fs_path(uri) or uri), rng)


async def _ask(session: Session, proposal: Proposal) -> None:
    message = proposal_message(
        proposal.call.tool, proposal.call.arguments, proposal.note, proposal.blocked_by
    )
    # A call a guard blocks is never offered with a plain Approve (it would be refused).
    first = OVERRIDE if proposal.blocked_by else FINISH if proposal.call.tool == "done" else APPROVE
    try:
        choice = await session.ls.window_show_message_request_async(
            lsp.ShowMessageRequestParams(
                type=lsp.MessageType.Info,
                message=message,
                actions=[lsp.MessageActionItem(title=a) for a in (first, DENY, EDIT)],
            )
        )
    except Exception as exc:
        log.info("window/showMessageRequest failed: %s", exc)
        return
    title = getattr(choice, "title", None)
    if title is None and isinstance(choice, dict):
        title = choice.get("title")
    try:
        if title in (APPROVE, FINISH, OVERRIDE):
            await decisions.decide(
                session, proposal.id, "override" if title == OVERRIDE else "approve"
            )
        elif title == DENY:
            await reviewer_files.open_correction(session, proposal)
        elif title == EDIT:
            await reviewer_files.open_edit(session, proposal)
    except JsonRpcException as exc:
        session.show_message(f"Proposal {proposal.id}: {exc.message}", warn=True)
