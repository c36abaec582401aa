"""A connection's state as plain data: what the client can do (resolved once, at
initialize), the proposals it was shown and the documents they sit on, the documents it
has open, the files opened for the reviewer, the regions a decision just wrote.

No behaviour beyond bookkeeping lives here; the modules beside it act on this data.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lsprotocol import types as lsp

from .hunk_votes import HunkVotes

if TYPE_CHECKING:
    from continual_lsp.agent.proposal import Proposal

# Initialization option / experimental capability by which a client says it renders
# `continual/proposal` itself (the VS Code extension, the Neovim module); without it
# non-file proposals are also offered through window/showMessageRequest.
CAPABILITY = "continualProposals"


@dataclass(frozen=True)
class ClientCapabilities:
    """The few client capabilities the server branches on."""

    renders_proposals: bool = False
    show_document: bool = False
    work_done_progress: bool = False
    document_changes: bool = False  # versioned WorkspaceEdits

    @classmethod
    def resolve(cls, params: lsp.InitializeParams) -> ClientCapabilities:
        caps = params.capabilities
        window, workspace = caps.window, caps.workspace
        return cls(
            renders_proposals=declares_proposals(params),
            show_document=bool(window and window.show_document and window.show_document.support),
            work_done_progress=bool(window and window.work_done_progress),
            document_changes=bool(
                workspace and workspace.workspace_edit and workspace.workspace_edit.document_changes
            ),
        )


def declares_proposals(params: lsp.InitializeParams) -> bool:
    """A client renders `continual/proposal` itself when it says so in either place:
    `initializationOptions.continualProposals: true` or
    `capabilities.experimental.continualProposals: true`."""
    options: Any = params.initialization_options
    experimental: Any = params.capabilities.experimental
    return any(
        isinstance(source, dict) and bool(source.get(CAPABILITY))
        for source in (options, experimental)
    )


@dataclass
class OpenedFile:
    """A file the server wrote and opened for the reviewer; its kind is its folder name."""

    kind: Literal["corrections", "edits", "diffs"]
    proposal_id: str
    path: Path


@dataclass
class AppliedRegion:
    """Lines a proposal just wrote; a reviewer change there soon after is an edit signal."""

    proposal_id: str
    content: str
    start: int  # 0-based first changed line in `content`
    end: int  # exclusive
    at: float = field(default_factory=time.monotonic)
    timer: asyncio.TimerHandle | None = None
    recorded: str | None = None  # the diff last recorded, so a burst records once


@dataclass
class SessionState:
    """Everything a connection remembers. URIs are normalised (see documents.py)."""

    workspace: Path | None = None
    capabilities: ClientCapabilities = field(default_factory=ClientCapabilities)
    proposals: dict[str, Proposal] = field(default_factory=dict)  # pending, by id
    shown: set[str] = field(default_factory=set)  # ids ever shown: a late duplicate stays dead
    proposal_uris: dict[str, str] = field(default_factory=dict)  # id → uri of its diagnostic
    open_documents: dict[str, str] = field(default_factory=dict)  # uri → the client's spelling
    files: dict[str, OpenedFile] = field(default_factory=dict)  # uri → file we opened
    applied: dict[str, AppliedRegion] = field(default_factory=dict)  # uri → region
    progress_tokens: set[str] = field(default_factory=set)  # created on the client
    hunk_votes: HunkVotes = field(default_factory=HunkVotes)  # per-hunk verdicts so far

    def proposals_on(self, uri: str) -> list[Proposal]:
        """Pending proposals whose diagnostic is on `uri`."""
        return [
            self.proposals[pid]
            for pid, on in self.proposal_uris.items()
            if on == uri and pid in self.proposals
        ]

    def of_task(self, task_id: str) -> list[str]:
        return [p.id for p in self.proposals.values() if p.task_id == task_id]

    def touching(self, rel_paths: set[str]) -> set[str]:
        """Workspace paths among `rel_paths` that a pending proposal changes."""
        return {
            p.preview.path
            for p in self.proposals.values()
            if p.preview is not None and p.preview.path in rel_paths
        }
