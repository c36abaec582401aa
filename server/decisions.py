"""Decisions: approve, override, deny, edit. Both or neither: an approved change reaches the
client's buffer and the agent's record together, or the buffer is rolled back."""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pygls.exceptions import JsonRpcException

from continual_lsp.protocol import DecideResult

from . import edit_signals, proposals
from .errors import RequestFailed

if TYPE_CHECKING:
    from continual_lsp.agent.agent import Agent
    from continual_lsp.agent.proposal import DecideOutcome, Proposal

    from .session import Session


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


async def decide(
    session: Session,
    proposal_id: str,
    decision: str,
    correction: str | None = None,
    edited_arguments: dict[str, Any] | None = None,
) -> DecideResult:
    """Record a decision and act on it."""
    proposal = await proposals.lookup(session, proposal_id)
    agent = await session.ready_agent()
    with contextlib.suppress(JsonRpcException):
        await edit_signals.flush(session)
    async with session.decide_lock:
        with session.events.holding():
            if decision in ("approve", "override"):
                outcome = await _approve(session, agent, proposal, decision)
            else:
                uri = proposals.proposal_uri(session, proposal)
                before = session.documents.text(uri) if uri else None
                outcome = await session.call(
                    agent.decide, proposal.id, decision, correction, edited_arguments
                )
                proposals.forget(session, proposal.id)
                if decision == "edit" and uri is not None:
                    await _sync_buffer(session, proposal, uri, before)
            if outcome.next_proposal is not None:
                session.events.announce("proposal", outcome.next_proposal)
    following = outcome.next_proposal
    return DecideResult(
        ok=outcome.ok,
        learned=outcome.learned,
        next_proposal_id=following.id if following else None,
        next_proposal=proposals.payload(session, following) if following else None,
    )


async def _check_decidable(
    session: Session, agent: Agent, proposal: Proposal, decision: str
) -> None:
    """Refuse before touching the buffer what the agent would refuse after."""
    status = await session.call(agent.proposal_status, proposal.id)
    if status is None:
        raise RequestFailed(f"unknown proposal {proposal.id!r}")
    if status != "pending":
        proposals.forget(session, proposal.id)
        raise RequestFailed(f"proposal {proposal.id!r} was already {status}")
    if decision == "approve":
        # The guards as they are now (one may have come or gone since it was shown).
        now = await session.call(agent.proposal, proposal.id)
        if now is not None and now.blocked_by:
            raise RequestFailed(
                f"a guard blocks this call: {now.blocked_by} Edit it, deny it, or override "
                'the guard (decision "override").'
            )
    preview = proposal.preview
    if preview is not None and session.workspace is not None:
        on_disk = await session.blocking(_sha256, session.workspace / preview.path)
        if on_disk != preview.old_sha256:
            await session.call(agent.invalidate_path, preview.path)
            proposals.forget(session, proposal.id)
            what = "was deleted" if on_disk is None else "changed on disk"
            raise RequestFailed(
                f"{preview.path} {what} since proposal {proposal.id} was made; "
                "it was not applied and is now stale"
            )


async def _approve(
    session: Session, agent: Agent, proposal: Proposal, decision: str = "approve"
) -> DecideOutcome:
    """Approve or override (both run the call). One path for every client: the server changes an open buffer itself with a
    versioned workspace/applyEdit (the client refuses it if its buffer moved on, e.g.
    a didChange still on its way), then the agent writes the file. A file not open in
    the client is written by the agent alone. Nothing depends on when the client
    sends its changes."""
    preview = proposal.preview
    uri = proposals.proposal_uri(session, proposal)
    buffer = session.documents.text(uri) if uri else None
    we_applied = False
    if preview is not None and uri is not None and buffer is not None:
        old = preview.old_content or ""
        # Before the buffer is touched: an already decided or stale proposal is
        # refused here.
        await _check_decidable(session, agent, proposal, decision)
        if buffer == old:
            await session.documents.apply(
                uri, old, preview.new_content, f"{decision.title()} {proposal.id}"
            )
            we_applied = True
        elif buffer != preview.new_content:  # else the reviewer typed it in already
            raise RequestFailed(
                f"{preview.path} has unsaved changes in the editor since proposal "
                f"{proposal.id} was made; save or undo them first, or deny the proposal"
            )
    try:
        outcome = await session.call(agent.decide, proposal.id, decision)
    except Exception:
        if we_applied and preview is not None and uri is not None:
            # Both or neither: the decision was not recorded, so the buffer goes back.
            # Unversioned: the client's didChange for our edit may not have come yet.
            with contextlib.suppress(Exception):
                await session.documents.apply(
                    uri,
                    preview.new_content,
                    preview.old_content or "",
                    "Undo approve",
                    versioned=False,
                )
        proposals.forget(session, proposal.id)
        raise
    proposals.forget(session, proposal.id)
    if preview is not None and uri is not None:
        edit_signals.track(
            session, uri, proposal.id, preview.old_content or "", preview.new_content
        )
    return outcome


async def _sync_buffer(session: Session, proposal: Proposal, uri: str, before: str | None) -> None:
    """After the agent wrote an edited call to disk, bring an open, untouched buffer
    along so the reviewer sees (and can undo) what was written."""
    assert session.workspace is not None
    path = session.workspace / (proposal.preview.path if proposal.preview else "")
    try:
        after = await session.blocking(path.read_text)
    except OSError:
        return
    old = proposal.preview.old_content if proposal.preview else None
    if before is not None and before == (old or "") and before != after:
        with contextlib.suppress(RequestFailed):
            await session.documents.apply(uri, before, after, f"Edit {proposal.id}")
    edit_signals.track(session, uri, proposal.id, old or "", after)
