"""What the agent hands out: a Proposal, the outcome of a decision, and the listener the
server implements. Data only: the server turns a Proposal into its LSP payload
(`server/proposals.py`)."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel

from continual_lsp.agent.training_jobs import ProgressListener
from continual_lsp.protocol import (
    AllowOffer,
    Hunk,
    LearnedNotification,
    RoutedNotification,
    TaskDoneNotification,
)
from continual_lsp.protocol import Learned as LearnedPayload
from continual_lsp.tools import hunks as hunk_spans
from continual_lsp.tools.base import Preview, ToolCall, ToolResult


class Proposal(BaseModel):
    id: str
    task_id: str
    call: ToolCall
    read_only: bool
    preview: Preview | None = None
    note: str | None = None
    adapter_version: str | None = None
    allow_offer: AllowOffer | None = None
    checked: str | None = None  # what was verified before showing (a file change)
    # The guard's reason when one blocks the call: Edit, Deny or override, never approve.
    blocked_by: str | None = None

    def hunks(self) -> list[Hunk]:
        """The hunks of a change to an existing file (empty: decided only as a whole)."""
        if self.preview is None or self.preview.old_content is None:
            return []
        return [
            Hunk(
                index=i,
                old_start=s.old_start + 1,
                old_lines=s.old_end - s.old_start,
                new_start=s.new_start + 1,
                new_lines=s.new_end - s.new_start,
            )
            for i, s in enumerate(
                hunk_spans.spans(self.preview.old_content, self.preview.new_content)
            )
        ]


class DecideOutcome(BaseModel):
    ok: bool
    result: ToolResult | None = None
    learned: LearnedPayload | None = None
    next_proposal: Proposal | None = None
    task_done: str | None = None


class AgentListener(ProgressListener, Protocol):
    def on_proposal(self, proposal: Proposal) -> None: ...
    def on_learned(self, note: LearnedNotification) -> None: ...
    def on_routed(self, note: RoutedNotification) -> None: ...
    def on_task_done(self, note: TaskDoneNotification) -> None: ...


class SilentListener:
    """The listener of an agent nobody watches (a bench, a test)."""

    def on_proposal(self, proposal: Proposal) -> None:
        pass

    def on_learned(self, note: LearnedNotification) -> None:
        pass

    def on_routed(self, note: RoutedNotification) -> None:
        pass

    def on_task_done(self, note: TaskDoneNotification) -> None:
        pass

    def on_progress(
        self, token: str, title: str, message: str, percentage: int | None, done: bool
    ) -> None:
        pass
