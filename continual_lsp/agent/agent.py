"""The Agent: one per user. Proposes one tool call per turn and acts on the reviewer's
decisions.

The door: the public API, the lock every call holds, and the wiring of the parts
(`parts.Parts`) that the rooms receive: `turns` (the turn loop), `decide` (the
decisions, commit-then-act), `retry` (the retry after a denial), `recovery` (what a crash
left undone). A decision commits and acts; the Agent then starts the next turn.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from continual_lsp.agent import calls, decide, recovery, turns
from continual_lsp.agent.checkpoints import Checkpoints
from continual_lsp.agent.errors import AgentError
from continual_lsp.agent.landing import StepLanding
from continual_lsp.agent.lanes_facade import LanesFacade
from continual_lsp.agent.parts import LazySampler, Parts
from continual_lsp.agent.proposal import AgentListener, DecideOutcome, Proposal, SilentListener
from continual_lsp.agent.training_jobs import TrainingJobs
from continual_lsp.config import Settings, default_store_path
from continual_lsp.lanes.routing_ledger import LedgerError
from continual_lsp.policy.base import Sampler
from continual_lsp.policy.model_files import starter_name
from continual_lsp.protocol import (
    AllowResult,
    Decision,
    HunkDecision,
    LedgerResult,
    PromoteResult,
    StatusResult,
    UndoResult,
)
from continual_lsp.store import Store
from continual_lsp.tools.base import ToolCall, ToolError
from continual_lsp.tools.runner import ToolRunner


class Agent:
    def __init__(
        self,
        settings: Settings,
        workspace: Path,
        *,
        store: Store | None = None,
        policy: Sampler | None = None,
        listener: AgentListener | None = None,
    ) -> None:
        self.settings = settings
        self.workspace = Path(workspace).resolve()
        if not self.workspace.is_dir():
            raise AgentError(f"workspace {self.workspace} is not a directory")
        self.store = store or Store(settings.store_path or default_store_path(settings.user))
        self.listener: AgentListener = listener or SilentListener()
        self.tools = ToolRunner(self.workspace, settings)
        self._lock = threading.RLock()
        self.training = TrainingJobs(self.store, settings)
        self._sampler = LazySampler(settings, self.training, policy)
        self.lanes = LanesFacade(self.store, settings, self._sampler.token_count)
        self.checkpoints = Checkpoints(self.store, self.tools)
        self._parts = Parts(
            settings=settings,
            workspace=self.workspace,
            store=self.store,
            tools=self.tools,
            lanes=self.lanes,
            training=self.training,
            checkpoints=self.checkpoints,
            listener=self.listener,
            sampler=self._sampler,
            landing=StepLanding(self.training, self.listener),
        )
        recovery.recover(self._parts)

    @property
    def policy(self) -> Sampler:
        return self._sampler.get()

    # -- tasks and decisions --------------------------------------------------------------

    def start_task(self, text: str, files: Sequence[str] = ()) -> tuple[str, Proposal | None]:
        """Start a task; `files` (the editor's current file, say) are read into the
        conversation first, as executed reads: a small model that sees the file edits it
        instead of guessing a path. A file that cannot be read fails the request before
        the task exists."""
        text = text.strip()
        if not text:
            raise AgentError("a task needs some text")
        with self._lock:
            return turns.start(self._parts, text, files)

    def decide(
        self,
        proposal_id: str,
        decision: Decision,
        correction: str | None = None,
        edited_arguments: dict[str, Any] | None = None,
        hunks: list[HunkDecision] | None = None,
    ) -> DecideOutcome:
        with self._lock:
            parts = self._parts
            task, proposal = decide.pending(parts, proposal_id)
            if hunks:
                decision, correction, edited_arguments = decide.resolve_hunks(
                    proposal, hunks, correction
                )
            if decision == "deny":
                return decide.deny(parts, task, proposal, (correction or "").strip())
            learned = None
            if decision == "edit":
                result, learned = decide.edit(parts, task, proposal, edited_arguments, correction)
            elif decision == "approve":
                result = decide.approve(parts, task, proposal)
            elif decision == "override":
                result = decide.override(parts, task, proposal)
            else:
                raise AgentError(
                    f"unknown decision {decision!r}: use approve, deny, edit or override"
                )
            outcome = turns.next_turn(parts, task, result)
            outcome.learned = learned
            return outcome

    @staticmethod
    def resolve_hunks(
        proposal: Proposal, decisions: list[HunkDecision], correction: str | None = None
    ) -> tuple[Literal["approve", "deny", "edit"], str | None, dict[str, Any] | None]:
        """A hunk-by-hunk verdict as a whole decision (`decide.resolve_hunks`); the server
        resolves one before it applies an approve through the editor's buffer."""
        return decide.resolve_hunks(proposal, decisions, correction)

    def undo(self, proposal_id: str | None = None, reason: str | None = None) -> UndoResult:
        """Restore what an applied change replaced (the latest when no id): a late denial
        (`decide.undo`)."""
        with self._lock:
            return decide.undo(self._parts, proposal_id, reason)

    def allow(self, proposal_id: str) -> AllowResult:
        """ "Always allow calls like this one": an allow rule in the CODE lane."""
        proposal = self.proposal(proposal_id)
        if proposal is None:
            raise AgentError(f"unknown proposal {proposal_id!r}")
        with self._lock:
            return decide.allow(self._parts, proposal)

    def record_manual_edit(
        self, proposal_id: str, diff: str, new_content: str | None = None
    ) -> int | None:
        """The reviewer changed lines an approved proposal just wrote: an edit signal.

        The file as the reviewer left it is the demonstration (a `write` of it), so the
        step teaches what the reviewer wanted, not only that something was wrong.
        Training runs in the background; the job id is returned.
        """
        row = self.store.proposal(proposal_id)
        if row is None:
            raise AgentError(f"unknown proposal {proposal_id!r}")
        if row["status"] not in ("approve", "edit", "override"):
            raise AgentError(f"proposal {proposal_id!r} was {row['status']}, not applied")
        self.store.append_event("manual_edit", {"diff": diff}, row["task_id"], proposal_id)
        path = (row["preview"] or {}).get("path")
        demonstration = None
        if path and new_content is not None:
            call = ToolCall(tool="write", arguments={"path": path, "content": new_content})
            try:
                call.parsed()
                demonstration = call
            except ValidationError:
                pass  # too large to demonstrate in one call; the event still records it
        if demonstration is None:
            return None
        with self._lock:
            return self.training.enqueue(proposal_id, "edit", None, demonstration)

    # -- notes and the ledger -------------------------------------------------------------

    def note(self, text: str) -> None:
        text = text.strip()
        if not text:
            raise AgentError("a note needs some text")
        with self._lock:
            self.store.append_event("note", {"text": text})
            for task in self._parts.tasks.values():
                task.conversation.add_note(text)
            item = self.lanes.route_note(text)
            if item is not None:
                self.listener.on_routed(item)

    def ledger(self) -> LedgerResult:
        return self.lanes.ledger()

    def promote(self, item_id: str) -> PromoteResult:
        """The reviewer keeps a task-scoped correction as a standing rule."""
        with self._lock:
            try:
                routed = self.lanes.promote(item_id)
            except LedgerError as exc:
                raise AgentError(str(exc)) from exc
        self.listener.on_routed(routed)
        return PromoteResult(
            ok=True, item_id=routed.item_id, lane=routed.lane, reason=routed.reason
        )

    def revert(self, item_id: str) -> None:
        with self._lock:
            try:
                version = self.lanes.revert(item_id)
            except LedgerError as exc:
                raise AgentError(str(exc)) from exc
            if version is not None:
                self.training.revert_adapter(version, self._sampler.built)

    # -- reading the state ----------------------------------------------------------------

    def status(self) -> StatusResult:
        pending = next((t.pending for t in self._parts.tasks.values() if t.pending), None)
        return StatusResult(
            backend=self.settings.backend,
            model=self.settings.model,
            adapter_version=self.training.current_version_name(),
            training_steps=len(self.store.adapters()),
            queue_depth=self.store.queue_depth(),
            pending_proposal_id=pending,
            starter=starter_name(self.settings.model, self.settings.starter)
            if self.settings.backend == "local"
            else None,
            autonomy=self.settings.autonomy,
        )

    def proposal(self, proposal_id: str) -> Proposal | None:
        return calls.load_proposal(self._parts, proposal_id)

    def proposal_status(self, proposal_id: str) -> str | None:
        """The status: pending, a decision (approve, deny, edit) or stale; None if unknown."""
        row = self.store.proposal(proposal_id)
        return None if row is None else str(row["status"])

    def pending_proposals(self) -> list[Proposal]:
        """The proposal each open task waits on, oldest task first."""
        tasks = self._parts.tasks.values()
        found = (self.proposal(t.pending) for t in tasks if t.pending)
        return [p for p in found if p is not None]

    # -- the workspace and the end --------------------------------------------------------

    def invalidate_path(self, rel_path: str) -> list[str]:
        """A file changed outside a proposal: pending proposals on it can never be applied."""
        stale: list[str] = []
        with self._lock:
            for task in self._parts.tasks.values():
                proposal = self.proposal(task.pending) if task.pending else None
                if proposal and proposal.preview and proposal.preview.path == rel_path:
                    try:
                        self.tools.check_fresh(proposal.preview)
                    except ToolError:
                        self.store.set_proposal_status(proposal.id, "stale")
                        task.pending = None
                        stale.append(proposal.id)
        return stale

    def await_steps(self) -> None:
        """Wait for the denials' steps still running (each up to the wait limit). Before
        the student samples a turn, so what it proposes after a correction comes from the
        weights that learned it; and before a headless run closes, so its steps land."""
        self._parts.landing.join()

    def close(self) -> None:
        self._parts.landing.close()
        self.training.stop()
        self.store.close()
