"""Pending proposals on the client's documents: shown as a notification and, for a file
change, as a diagnostic on the lines it changes (where the code actions are offered)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from continual_lsp.protocol import NOTIFY_PROPOSAL

from .documents import normalize_uri
from .errors import RequestFailed
from .hunk_votes import hunk_diagnostics
from .lsp_text import proposal_message

if TYPE_CHECKING:
    from continual_lsp.agent.agent import Proposal

    from .session import Session

FILE_TOOLS = ("write", "edit", "edit_lines")


def proposal_uri(session: Session, proposal: Proposal) -> str | None:
    """The document a file proposal changes (normalised), None for other calls."""
    if proposal.call.tool not in FILE_TOOLS or proposal.preview is None:
        return None
    uri = session.notification(proposal).uri
    return normalize_uri(uri) if uri else None


def show(session: Session, proposal: Proposal) -> bool:
    """Notify the client and publish the diagnostic; False when it was shown before."""
    state = session.state
    if proposal.id in state.shown:
        return False  # announced twice (listener and return value): show once
    state.shown.add(proposal.id)
    # The agent keeps one pending proposal per task: a new one replaces the old.
    for old in state.of_task(proposal.task_id):
        forget(session, old)
    state.proposals[proposal.id] = proposal
    session.ls.protocol.notify(NOTIFY_PROPOSAL, session.notification(proposal).dump())
    uri = proposal_uri(session, proposal)
    if uri is not None:
        state.proposal_uris[proposal.id] = uri
        publish(session, uri)
    return True


def forget(session: Session, proposal_id: str) -> None:
    """The proposal is decided, stale or replaced: drop it and its diagnostic."""
    session.state.proposals.pop(proposal_id, None)
    session.state.hunk_votes.forget(proposal_id)
    uri = session.state.proposal_uris.pop(proposal_id, None)
    if uri is not None:
        publish(session, uri)


def diagnostics_for(session: Session, uri: str) -> list[lsp.Diagnostic]:
    out = []
    for proposal in session.state.proposals_on(uri):
        rng = session.notification(proposal).range
        start = (rng.start.line, 0) if rng else (0, 0)
        end = (rng.end.line, rng.end.character) if rng else (0, 0)
        out.append(
            lsp.Diagnostic(
                range=lsp.Range(
                    start=lsp.Position(line=start[0], character=start[1]),
                    end=lsp.Position(line=end[0], character=min(end[1], 10_000)),
                ),
                message=proposal_message(
                    proposal.call.tool, proposal.call.arguments, proposal.note, proposal.blocked_by
                ),
                severity=lsp.DiagnosticSeverity.Information,
                source="continual",
                code=proposal.id,
                data={"proposalId": proposal.id},
            )
        )
        if len(proposal.hunks()) > 1:
            out.extend(hunk_diagnostics(proposal, session.state.hunk_votes.decided(proposal.id)))
    return out


def publish(session: Session, uri: str) -> None:
    session.ls.text_document_publish_diagnostics(
        lsp.PublishDiagnosticsParams(
            uri=session.documents.client_uri(uri), diagnostics=diagnostics_for(session, uri)
        )
    )


def proposals_at(session: Session, uri: str, rng: lsp.Range) -> list[Proposal]:
    """Pending file proposals on `uri` whose changed lines meet `rng`."""
    found = []
    for proposal in session.state.proposals_on(uri):
        prange = session.notification(proposal).range
        first, last = (prange.start.line, prange.end.line) if prange else (0, 0)
        if rng.start.line <= last and first <= rng.end.line:
            found.append(proposal)
    return found


async def lookup(session: Session, proposal_id: str) -> Proposal:
    """A proposal this connection was shown, else the agent's (another connection's)."""
    if not isinstance(proposal_id, str) or not proposal_id:
        raise RequestFailed("a proposal id is required")
    proposal = session.state.proposals.get(proposal_id)
    if proposal is None:
        agent = await session.agent()
        proposal = await session.call(agent.proposal, proposal_id)
    if proposal is None:
        raise RequestFailed(f"unknown proposal {proposal_id!r}")
    return proposal
