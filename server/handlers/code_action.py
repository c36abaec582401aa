"""textDocument/codeAction: on the lines a pending proposal changes, offer *Approve*
(the command alone: the server applies the edit with a versioned workspace/applyEdit, so
approving never races the client's didChange), *Deny with correction…*, *Edit proposal…*
and *Show diff*; a proposal a guard blocks offers *Override guard* instead of *Approve*
(approving it would be refused); on a hunk of a multi-hunk change, *Accept hunk n* /
*Reject hunk n…* first. Pure in-memory work: no agent call, so it stays fast while the agent
samples or trains."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from ..documents import normalize_uri
from ..hunk_votes import hunk_actions
from ..lsp_text import describe_call
from ..proposals import diagnostics_for, proposals_at

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from continual_lsp.agent.proposal import Proposal

    from ..connection import Connection
    from ..session import Session

APPROVE, DENY, EDIT, DIFF, OVERRIDE = (
    "continual.approve",
    "continual.deny",
    "continual.edit",
    "continual.showDiff",
    "continual.override",
)


def actions_for(session: Session, uri: str, proposal: Proposal) -> list[lsp.CodeAction]:
    pid = proposal.id
    diagnostics = [d for d in diagnostics_for(session, uri) if d.code == pid]
    summary = describe_call(proposal.call.tool, proposal.call.arguments)

    def action(title: str, command: str, *, preferred: bool = False) -> lsp.CodeAction:
        return lsp.CodeAction(
            title=title,
            kind=lsp.CodeActionKind.QuickFix,
            diagnostics=diagnostics or None,
            is_preferred=preferred or None,
            command=lsp.Command(title=title, command=command, arguments=[pid]),
        )

    first = (
        action(f"Override guard: {summary}", OVERRIDE)
        if proposal.blocked_by
        else action(f"Approve: {summary}", APPROVE, preferred=True)
    )
    return [
        first,
        action("Deny with correction…", DENY),
        action("Edit proposal…", EDIT),
        action("Show diff", DIFF),
    ]


def register(ls: LanguageServer) -> None:
    @ls.feature(
        lsp.TEXT_DOCUMENT_CODE_ACTION,
        lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix]),
    )
    def code_action(ls: Connection, params: lsp.CodeActionParams) -> list[lsp.CodeAction] | None:
        session = ls.session
        uri = normalize_uri(params.text_document.uri)
        actions: list[lsp.CodeAction] = []
        rng = params.range
        here = [
            d
            for d in diagnostics_for(session, uri)
            if d.range.start.line <= rng.end.line and rng.start.line <= d.range.end.line
        ]
        for proposal in proposals_at(session, uri, rng):
            actions.extend(hunk_actions(proposal, here))
            actions.extend(actions_for(session, uri, proposal))
        return actions or None
