"""Pending proposals on the client's documents: shown as a notification (`notification`,
the wire payload of a Proposal) and, for a file change, as a diagnostic on the lines it
changes (where the code actions are offered)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from continual_lsp.protocol import NOTIFY_PROPOSAL, Position, ProposalNotification, Range

from .documents import normalize_uri
from .errors import RequestFailed
from .hunk_votes import hunk_diagnostics
from .lsp_text import proposal_message

if TYPE_CHECKING:
    from continual_lsp.agent.proposal import Proposal

    from .session import Session

FILE_TOOLS = ("write", "edit", "edit_lines")


def notification(proposal: Proposal, workspace: Path) -> ProposalNotification:
    """The proposal as the client sees it: the document it is about (none for a path
    outside `workspace`), the lines it changes, and its hunks when there are several."""
    uri = rng = None
    preview = proposal.preview
    path = preview.path if preview else proposal.call.arguments.get("path")
    if isinstance(path, str) and proposal.call.tool in ("read", *FILE_TOOLS):
        target = (workspace / path).resolve()
        # A path that escapes the workspace has no document to show (the tools refuse it).
        if target.is_relative_to(workspace.resolve()):
            uri = target.as_uri()
    if preview and preview.changed_lines:
        first, last = preview.changed_lines
        rng = Range(
            start=Position(line=first - 1, character=0),
            end=Position(line=max(first - 1, last - 1), character=10_000),
        )
    return ProposalNotification(
        proposal_id=proposal.id,
        task_id=proposal.task_id,
        tool=proposal.call.tool,
        arguments=proposal.call.arguments,
        read_only=proposal.read_only,
        uri=uri,
        range=rng,
        diff=preview.diff if preview else None,
        note=proposal.note,
        adapter_version=proposal.adapter_version,
        hunks=hunks if len(hunks := proposal.hunks()) > 1 else None,
        allow_offer=proposal.allow_offer,
        blocked_by=proposal.blocked_by,
        checked=proposal.checked,
    )


def payload(session: Session, proposal: Proposal) -> ProposalNotification:
    """`notification` against the session's workspace (known from initialize on)."""
    assert session.state.workspace is not None
    return notification(proposal, session.state.workspace)


def proposal_uri(session: Session, proposal: Proposal) -> str | None:
    """The document a file proposal changes (normalised), None for other calls."""
    if proposal.call.tool not in FILE_TOOLS or proposal.preview is None:
        return None
    uri = payload(session, proposal).uri
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
    session.ls.protocol.notify(NOTIFY_PROPOSAL, payload(session, proposal).dump())
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
        rng = payload(session, proposal).range
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
        prange = payload(session, proposal).range
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
