"""Hunk by hunk for plain LSP clients: a diagnostic per hunk, *Accept hunk* / *Reject
hunk…* code actions on it, and the verdicts collected until every hunk has one (then the
proposal is decided with `hunks`, as `continual/decide` would). A client that speaks the
`continual/*` protocol collects them itself and sends one `continual/decide`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from continual_lsp.protocol import HunkDecision

if TYPE_CHECKING:
    from continual_lsp.agent.proposal import Proposal

HUNK = "continual.hunk"  # [proposalId, index, accept, reason?]


class HunkVotes:
    """Verdicts given so far, per proposal (in memory: a restart asks again)."""

    def __init__(self) -> None:
        self._votes: dict[str, dict[int, HunkDecision]] = {}

    def add(self, proposal: Proposal, vote: HunkDecision) -> list[HunkDecision] | None:
        """Record one verdict; all of them once every hunk has one, else None."""
        total = len(proposal.hunks())
        if not 0 <= vote.index < total:
            raise ValueError(
                f"proposal {proposal.id} has {total} hunk(s), numbered from 0; "
                f"there is no hunk {vote.index}"
            )
        votes = self._votes.setdefault(proposal.id, {})
        votes[vote.index] = vote
        if len(votes) < total:
            return None
        return [votes[i] for i in range(total)]

    def decided(self, proposal_id: str) -> set[int]:
        return set(self._votes.get(proposal_id, {}))

    def forget(self, proposal_id: str) -> None:
        self._votes.pop(proposal_id, None)


def hunk_diagnostics(proposal: Proposal, decided: set[int]) -> list[lsp.Diagnostic]:
    """One diagnostic per undecided hunk (lines of the file as it is now)."""
    hunks = proposal.hunks()
    out = []
    for h in hunks:
        if h.index in decided:
            continue
        first = max(h.old_start - 1, 0)  # a pure insertion: the line it goes before
        last = first + max(h.old_lines, 1) - 1
        out.append(
            lsp.Diagnostic(
                range=lsp.Range(
                    start=lsp.Position(line=first, character=0),
                    end=lsp.Position(line=last, character=10_000),
                ),
                message=f"Proposed hunk {h.index + 1}/{len(hunks)}: "
                f"-{h.old_lines} +{h.new_lines} lines (accept or reject each hunk)",
                severity=lsp.DiagnosticSeverity.Information,
                source="continual",
                code=proposal.id,
                data={"proposalId": proposal.id, "hunk": h.index},
            )
        )
    return out


def hunk_actions(proposal: Proposal, diagnostics: list[lsp.Diagnostic]) -> list[lsp.CodeAction]:
    """*Accept hunk n* and *Reject hunk n…* for each hunk diagnostic in `diagnostics`."""
    total = len(proposal.hunks())
    out = []
    for diag in diagnostics:
        data = diag.data if isinstance(diag.data, dict) else {}
        if data.get("proposalId") != proposal.id or "hunk" not in data:
            continue
        index = int(data["hunk"])
        for title, accept in (
            (f"Accept hunk {index + 1}/{total}", True),
            (f"Reject hunk {index + 1}/{total}…", False),
        ):
            out.append(
                lsp.CodeAction(
                    title=title,
                    kind=lsp.CodeActionKind.QuickFix,
                    diagnostics=[diag],
                    command=lsp.Command(
                        title=title, command=HUNK, arguments=[proposal.id, index, accept]
                    ),
                )
            )
    return out
