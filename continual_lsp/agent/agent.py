"""The Agent: one per user. Proposes one tool call per turn and acts on the reviewer's decisions.

Order of work for every decision (the durability rule of DESIGN §1): commit the decision
to the store, then execute / enqueue training / route the correction, then mark it
applied. A crash anywhere after the commit is repaired by `_recover()` on the next start.

Over 500 lines on purpose: the Agent orders every decision (commit, act, mark applied)
and its recovery in one place; its parts (conversation, lanes facade, training jobs)
are already modules of their own.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ValidationError

from continual_lsp.agent.candidates import (
    Candidate,
    Screen,
    canonical,
    mean_logprob,
    ranked_by_lift,
    substituted,
)
from continual_lsp.agent.checkpoints import Checkpoints, UndoError
from continual_lsp.agent.conversation import KEEP_CALLS, Conversation
from continual_lsp.agent.lanes_facade import LanesFacade
from continual_lsp.agent.training_jobs import ProgressListener, TrainingJobs
from continual_lsp.agent.trials import first_passing
from continual_lsp.config import Settings, default_store_path
from continual_lsp.errors import ReviewerError
from continual_lsp.policy.base import Completion, DecodeRestrictions, SampleParams, Sampler
from continual_lsp.policy.model_files import starter_name
from continual_lsp.protocol import (
    AllowOffer,
    AllowResult,
    Decision,
    Hunk,
    HunkDecision,
    LearnedNotification,
    LedgerResult,
    Position,
    PromoteResult,
    ProposalNotification,
    Range,
    RoutedNotification,
    StatusResult,
    TaskDoneNotification,
    UndoResult,
)
from continual_lsp.protocol import Learned as LearnedPayload
from continual_lsp.store import Store, StoreError
from continual_lsp.text import shown_path, split_lines, unified_diff
from continual_lsp.tools import checks
from continual_lsp.tools import hunks as hunk_spans
from continual_lsp.tools.base import (
    FILE_CHANGING_TOOLS,
    READ_ONLY_TOOLS,
    TOOL_NAMES,
    Preview,
    ToolCall,
    ToolError,
    ToolResult,
)
from continual_lsp.tools.runner import ToolRunner

log = logging.getLogger(__name__)


class AgentError(ReviewerError):
    """A request the agent cannot carry out; the message is meant for the reviewer."""


class _Unparsable(ToolError):
    """A change that would leave a file that parsed not parsing (`tools.checks`)."""

    def __init__(self, message: str, problem: str) -> None:
        super().__init__(message)
        self.problem = problem


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

    def notification(self, workspace: Path) -> ProposalNotification:
        uri = rng = None
        path = self.preview.path if self.preview else self.call.arguments.get("path")
        if isinstance(path, str) and self.call.tool in ("read", "write", "edit", "edit_lines"):
            target = (workspace / path).resolve()
            # A path that escapes the workspace has no document to show (the tools refuse it).
            if target.is_relative_to(workspace.resolve()):
                uri = target.as_uri()
        if self.preview and self.preview.changed_lines:
            first, last = self.preview.changed_lines
            rng = Range(
                start=Position(line=first - 1, character=0),
                end=Position(line=max(first - 1, last - 1), character=10_000),
            )
        return ProposalNotification(
            proposal_id=self.id,
            task_id=self.task_id,
            tool=self.call.tool,
            arguments=self.call.arguments,
            read_only=self.read_only,
            uri=uri,
            range=rng,
            diff=self.preview.diff if self.preview else None,
            note=self.note,
            adapter_version=self.adapter_version,
            hunks=hunks if len(hunks := self.hunks()) > 1 else None,
            allow_offer=self.allow_offer,
            blocked_by=self.blocked_by,
            checked=self.checked,
        )


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


class _SilentListener:
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


class _Task:
    """In-memory state of one open task; the store holds the durable record."""

    def __init__(self, task_id: str, text: str, conversation: Conversation) -> None:
        self.id = task_id
        self.text = text
        self.conversation = conversation
        self.turn = 0
        self.retries = 0
        self.invalid_streak = 0
        self.denied: list[str] = []  # proposal ids denied in the current turn
        self.executed: set[str] = set()  # canonical JSON of calls already run
        self.history: list[ToolCall] = []  # the calls run, oldest first (sequence guards)
        self.pending: str | None = None
        self.done: str | None = None
        self.failing_test: str | None = None  # the command of the last test run, if it failed
        # Guards compiled from this task's denials: each must let the calls the reviewer
        # accepts next in the task through (`LanesFacade.let_through`).
        self.new_guards: list[str] = []


def _repeats(task: _Task, call: ToolCall) -> bool:
    """Whether `call` repeats one already run: it gives way to another sample (a task ends
    by `done`, the turn limit or the reviewer, never by a repeat). Looking again right
    after a call that could not run is not a repeat: the model is checking the text it
    got wrong."""
    if call.read_only and task.invalid_streak > 0:
        return False
    return canonical(call) in task.executed


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
        self.listener: AgentListener = listener or _SilentListener()
        self.tools = ToolRunner(self.workspace, settings)
        self._policy = policy
        self._lock = threading.RLock()
        self._tasks: dict[str, _Task] = {}
        # What each proposal's change was checked for (`Proposal.checked`), by proposal id.
        self._checked: dict[str, str] = {}
        # Denials' steps land while the reviewer reads the retry: (proposal id, job id)
        # for `_land_steps`, None to end it.
        self._landings: queue.Queue[tuple[str, int] | None] = queue.Queue()
        self._lander: threading.Thread | None = None
        self.lanes = LanesFacade(self.store, settings, self._token_count)
        self.training = TrainingJobs(self.store, settings)
        self.checkpoints = Checkpoints(self.store, self.tools)
        self._recover()

    # -- lazily built parts ---------------------------------------------------------------

    @property
    def policy(self) -> Sampler:
        if self._policy is None:
            from continual_lsp.policy import make_policy

            # Every agent of this process samples from one copy of the model, each with
            # its own user's adapter copied in per call (issue 20: N users, one model).
            self._policy = make_policy(self.settings, shared=True)
            self.training.sync_sampler(self._policy)
            # The server builds the policy when a client connects: the worker starts then
            # too, so the first correction costs a step, not a model load.
            self.training.warm()
        return self._policy

    def _token_count(self, text: str) -> int:
        if self._policy is None:
            return max(1, len(text) // 4)
        return len(self.policy.renderer.tokenize(text))

    # -- public API -----------------------------------------------------------------------

    def start_task(self, text: str, files: Sequence[str] = ()) -> tuple[str, Proposal | None]:
        """Start a task; `files` (the editor's current file, say) are read into the
        conversation first, as executed reads: a small model that sees the file edits it
        instead of guessing a path. A file that cannot be read fails the request before
        the task exists."""
        text = text.strip()
        if not text:
            raise AgentError("a task needs some text")
        with self._lock:
            reads = [self._read_in_view(path) for path in files]
            task_id = self.store.create_task(text, str(self.workspace))
            task = _Task(task_id, text, Conversation(text))
            self._tasks[task_id] = task
            for call, result in reads:
                self.store.append_event("in_view", {"path": call.arguments["path"]}, task_id)
                task.executed.add(canonical(call))
                task.conversation.add_call(call, result)
            proposal = self._advance(task)
            return task_id, proposal

    def _read_in_view(self, path: str) -> tuple[ToolCall, ToolResult]:
        try:
            rel = self.tools.rel(self.tools.resolve(path))
            call = ToolCall(tool="read", arguments={"path": rel})
            return call, self.tools.execute(call)
        except ToolError as exc:
            raise AgentError(f"cannot start with {path} in view: {exc}") from exc

    def decide(
        self,
        proposal_id: str,
        decision: Decision,
        correction: str | None = None,
        edited_arguments: dict[str, Any] | None = None,
        hunks: list[HunkDecision] | None = None,
    ) -> DecideOutcome:
        with self._lock:
            task, proposal = self._pending(proposal_id)
            if hunks:
                decision, correction, edited_arguments = self.resolve_hunks(
                    proposal, hunks, correction
                )
            if decision == "deny":
                return self._deny(task, proposal, (correction or "").strip())
            if decision == "edit":
                return self._edit(task, proposal, edited_arguments, correction)
            if decision == "approve":
                return self._approve(task, proposal)
            if decision == "override":
                return self._override(task, proposal)
            raise AgentError(f"unknown decision {decision!r}: use approve, deny, edit or override")

    @staticmethod
    def resolve_hunks(
        proposal: Proposal, decisions: list[HunkDecision], correction: str | None = None
    ) -> tuple[Literal["approve", "deny", "edit"], str | None, dict[str, Any] | None]:
        """A hunk-by-hunk verdict as a whole decision: all accepted is an approve, none a
        deny, some an edit holding the accepted hunks; the rejected hunks' reasons (after
        any overall `correction`) are the correction."""
        total = len(proposal.hunks())
        if total == 0 or proposal.preview is None:
            raise AgentError(f"proposal {proposal.id} changes no existing file: decide it whole")
        seen = {d.index: d for d in decisions}
        if len(seen) != len(decisions) or set(seen) != set(range(total)):
            raise AgentError(
                f"proposal {proposal.id} has {total} hunk(s), numbered from 0: decide each "
                f"exactly once (got {sorted(d.index for d in decisions)})"
            )
        accepted = sorted(i for i, d in seen.items() if d.accept)
        reasons = [
            f"hunk {i + 1}: {d.reason.strip()}" if total > 1 else d.reason.strip()
            for i, d in sorted(seen.items())
            if not d.accept and d.reason and d.reason.strip()
        ]
        text = "; ".join(
            ([correction.strip()] if correction and correction.strip() else []) + reasons
        )
        if len(accepted) == total:
            return "approve", None, None
        if not accepted:
            return "deny", text, None
        try:
            call = hunk_spans.partial_call(
                proposal.preview.path,
                proposal.preview.old_content,
                proposal.preview.new_content,
                accepted,
            )
        except ToolError as exc:
            raise AgentError(str(exc)) from exc
        return "edit", text or None, {"tool": call.tool, **call.arguments}

    def undo(self, proposal_id: str | None = None, reason: str | None = None) -> UndoResult:
        """Restore what an applied change replaced (the latest when no id): a late denial.

        Refused, with nothing touched, when a file changed since the change; the undo is
        committed before any file is restored, then trains and routes like a denial."""
        with self._lock:
            target = proposal_id or self.checkpoints.latest()
            if target is None:
                raise AgentError("nothing to undo: no applied change has a checkpoint")
            row = self.store.proposal(target)
            if row is None:
                raise AgentError(f"unknown proposal {target!r}")
            try:
                files = self.checkpoints.check(target)
            except UndoError as exc:
                raise AgentError(str(exc)) from exc
            reason = (reason or "").strip()
            correction = reason or f"The reviewer undid this {row['tool']} call."
            self.store.append_event(
                "undo", {"reason": reason or None, "paths": sorted(files)}, row["task_id"], target
            )
            restored = self.checkpoints.restore(target, files)
            self.store.set_proposal_status(target, "undone")
            proposal = self.proposal(target)
            assert proposal is not None
            self.training.enqueue(target, "deny", correction, None)
            if reason:
                routed = self.lanes.route_correction(reason, proposal, is_denial=True)
                if routed is not None:
                    self.listener.on_routed(routed)
            task = self._tasks.get(row["task_id"])
            if task is not None and task.done is None:
                task.conversation.add_feedback(
                    f"The reviewer undid your {row['tool']} call ({', '.join(restored)}): "
                    f"{correction}"
                )
            return UndoResult(ok=True, proposal_id=target, restored=restored)

    def allow(self, proposal_id: str) -> AllowResult:
        """ "Always allow calls like this one": an allow rule in the CODE lane."""
        proposal = self.proposal(proposal_id)
        if proposal is None:
            raise AgentError(f"unknown proposal {proposal_id!r}")
        with self._lock:
            try:
                item_id, rule = self.lanes.add_allow_rule(
                    proposal.call, proposal.preview, str(self.workspace), proposal_id, False
                )
            except ValueError as exc:
                raise AgentError(f"calls like this cannot be always allowed: {exc}") from exc
        return AllowResult(ok=True, item_id=item_id, rule=rule)

    def note(self, text: str) -> None:
        text = text.strip()
        if not text:
            raise AgentError("a note needs some text")
        with self._lock:
            self.store.append_event("note", {"text": text})
            for task in self._tasks.values():
                task.conversation.add_note(text)
            item = self.lanes.route_note(text)
            if item is not None:
                self.listener.on_routed(item)

    def ledger(self) -> LedgerResult:
        return self.lanes.ledger()

    def promote(self, item_id: str) -> PromoteResult:
        """The reviewer keeps a task-scoped correction as a standing rule."""
        from continual_lsp.lanes.routing_ledger import LedgerError

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
        from continual_lsp.lanes.routing_ledger import LedgerError

        with self._lock:
            try:
                version = self.lanes.revert(item_id)
            except LedgerError as exc:
                raise AgentError(str(exc)) from exc
            if version is not None:
                self.training.revert_adapter(version, self._policy)

    def status(self) -> StatusResult:
        pending = next((t.pending for t in self._tasks.values() if t.pending), None)
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
        row = self.store.proposal(proposal_id)
        if row is None:
            return None
        proposal = Proposal(
            id=row["id"],
            task_id=row["task_id"],
            call=ToolCall(tool=row["tool"], arguments=row["arguments"]),
            read_only=row["tool"] in ("read", "glob", "grep"),
            preview=Preview.model_validate(row["preview"]) if row["preview"] else None,
            adapter_version=row["adapter_version"],
            checked=self._checked.get(row["id"]),
        )
        if row["status"] == "pending":
            proposal.allow_offer = self._allow_offer(proposal.call, proposal.preview)
            task = self._tasks.get(row["task_id"])
            self._mark_blocked(proposal, task.history if task else [])
        return proposal

    def _mark_blocked(self, proposal: Proposal, history: Sequence[ToolCall]) -> None:
        """Set `blocked_by` when a guard blocks the proposal now (one compiled after it was
        proposed too): it is offered with Edit and override, never a plain Approve."""
        verdict = self.lanes.check_guards(proposal.call, proposal.preview, history)
        proposal.blocked_by = verdict.message if verdict.action == "block" else None

    def proposal_status(self, proposal_id: str) -> str | None:
        """The status: pending, a decision (approve, deny, edit) or stale; None if unknown."""
        row = self.store.proposal(proposal_id)
        return None if row is None else str(row["status"])

    def pending_proposals(self) -> list[Proposal]:
        """The proposal each open task waits on, oldest task first."""
        found = (self.proposal(t.pending) for t in self._tasks.values() if t.pending)
        return [p for p in found if p is not None]

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

    def invalidate_path(self, rel_path: str) -> list[str]:
        """A file changed outside a proposal: pending proposals on it can never be applied."""
        stale: list[str] = []
        with self._lock:
            for task in self._tasks.values():
                proposal = self.proposal(task.pending) if task.pending else None
                if proposal and proposal.preview and proposal.preview.path == rel_path:
                    try:
                        self.tools.check_fresh(proposal.preview)
                    except ToolError:
                        self.store.set_proposal_status(proposal.id, "stale")
                        task.pending = None
                        stale.append(proposal.id)
        return stale

    def close(self) -> None:
        if self._lander is not None:
            self._landings.put(None)  # ends `_land_steps` once `stop` ends its wait
        self.training.stop()
        self.store.close()

    # -- decisions ------------------------------------------------------------------------

    def _pending(self, proposal_id: str) -> tuple[_Task, Proposal]:
        row = self.store.proposal(proposal_id)
        if row is None:
            raise AgentError(f"unknown proposal {proposal_id!r}")
        if row["status"] != "pending":
            raise AgentError(f"proposal {proposal_id!r} was already {row['status']}")
        task = self._tasks.get(row["task_id"])
        if task is None or task.pending != proposal_id:
            raise AgentError(
                f"proposal {proposal_id!r} belongs to a task that is no longer open in this session"
            )
        proposal = self.proposal(proposal_id)
        assert proposal is not None
        return task, proposal

    def _record(self, proposal: Proposal, decision: str, **kwargs: Any) -> None:
        try:
            self.store.record_decision(proposal.id, decision, **kwargs)
        except StoreError as exc:
            raise AgentError(str(exc)) from exc

    def _check_fresh(self, task: _Task, proposal: Proposal) -> None:
        """Refuse a proposal whose file changed since it was made (it is stale now)."""
        if proposal.preview is not None:
            try:
                self.tools.check_fresh(proposal.preview)
            except ToolError as exc:
                self.store.set_proposal_status(proposal.id, "stale")
                task.pending = None
                raise AgentError(str(exc)) from exc

    def _approve(self, task: _Task, proposal: Proposal) -> DecideOutcome:
        self._check_fresh(task, proposal)
        verdict = self.lanes.check_guards(proposal.call, proposal.preview, task.history)
        self._fired(verdict.guard_id)
        if verdict.action == "block":
            # A guard compiled after the call was proposed (or the denied call offered
            # again for editing): approving cannot bypass it; overriding can, and says so.
            raise AgentError(
                f"a guard blocks this call: {verdict.message} Edit it, deny it, or override "
                'the guard (decision "override").'
            )
        self._record(proposal, "approve")
        result = self._run_accepted(task, proposal)
        self._learn_allow(proposal)
        return self._next(task, result)

    def _run_accepted(self, task: _Task, proposal: Proposal) -> ToolResult:
        """Run an approved or overridden call (its decision already committed)."""
        denied = [pid for pid, call in self._denied_calls(task).items() if call != proposal.call]
        result = self._execute(task, proposal, proposal.call)
        # The approved retry is the demonstration the denied turns lacked (DESIGN §4); the
        # reviewer approving a call they denied earlier is no demonstration for that denial.
        for denied_id in denied:
            self.training.enqueue(denied_id, "approved_retry", None, proposal.call)
        self.store.mark_applied(proposal.id, result.model_dump())
        return result

    def _override(self, task: _Task, proposal: Proposal) -> DecideOutcome:
        """Run a call a guard blocks: the reviewer knows better than the guard. The
        override counts against the guard (twice retires it to CONTEXT), and a guard
        compiled from this task's denials is narrowed or dropped for it."""
        self._check_fresh(task, proposal)
        verdict = self.lanes.check_guards(proposal.call, proposal.preview, task.history)
        if verdict.action != "block" or verdict.guard_id is None:
            raise AgentError(f"no guard blocks proposal {proposal.id}: approve it instead")
        self._record(proposal, "override", correction=verdict.message)
        changes = self._let_through(task, proposal.call, proposal.preview)
        result = self._run_accepted(task, proposal)
        retired = self.lanes.guard_overridden(verdict.guard_id, proposal.id)
        for change in [*changes, *([retired] if retired else [])]:
            self.listener.on_routed(change)
        return self._next(task, result)

    def _let_through(
        self, task: _Task, call: ToolCall, preview: Preview | None
    ) -> list[RoutedNotification]:
        """The guards compiled from this task's denials that would block `call`, which the
        reviewer accepted, narrowed or dropped (DESIGN §5); `preview` against the files as
        they are before it runs."""
        if not task.new_guards:
            return []
        path = call.arguments.get("path") or call.arguments.get("cmd")
        what = f"{call.tool} {path}" if isinstance(path, str) else call.tool
        return self.lanes.let_through(task.new_guards, call, preview, task.history, what)

    def _track_new_guard(self, task: _Task, routed: RoutedNotification | None, source: str) -> None:
        """Remember a guard compiled from `source`, a denial in `task`."""
        if routed is None or routed.lane != "CODE":
            return
        row = self.store.lane_item(routed.item_id)
        if (
            row is not None
            and row.get("source") == source
            and routed.item_id not in task.new_guards
        ):
            task.new_guards.append(routed.item_id)

    def _learn_allow(self, proposal: Proposal) -> None:
        """With `allow_learn_after` set, that many approvals of a class become its rule."""
        after = self.settings.allow_learn_after
        if after is None or self.settings.autonomy in ("manual", "read_only"):
            return
        ws = str(self.workspace)
        if self.lanes.allow_offer(proposal.call, proposal.preview, ws, after) is not None:
            item_id, _rule = self.lanes.add_allow_rule(
                proposal.call, proposal.preview, ws, proposal.id, learned=True
            )
            self.store.append_event("allow_learned", {"itemId": item_id}, proposal.task_id)

    def _deny(
        self, task: _Task, proposal: Proposal, correction: str, route: bool = True
    ) -> DecideOutcome:
        if not correction:
            raise AgentError("a denial needs a correction: say what the agent should do instead")
        self._record(proposal, "deny", correction=correction)
        # The step's job is committed with the denial, held until its demonstration (the
        # chosen retry) is known: whatever fails or crashes after this, the step runs.
        job_id = self.training.enqueue(proposal.id, "deny", correction, None, held=True)
        task.pending = None
        choice = routed = None
        examples: list[ToolCall] = []
        try:
            # A guard's own block message is already a CODE item: routing it again would
            # only duplicate it. Routed before the retry is chosen, so a guard compiled
            # from this very correction already screens the candidates; and the
            # correction's cluster says which earlier approved calls the teacher may see.
            if route:
                routed = self.lanes.route_correction(correction, proposal, is_denial=True)
                self._track_new_guard(task, routed, proposal.id)
            task.denied.append(proposal.id)
            task.conversation.add_feedback(correction)
            task.retries += 1
            if task.retries > self.settings.max_retries:
                self._finish(task, f"stopped after {self.settings.max_retries} denied retries")
            else:
                choice = self._choose_retry(task, proposal, correction)
            if routed is not None:
                examples = self.lanes.cluster_demonstrations(routed.item_id, exclude=proposal.id)
        finally:
            # The chosen retry is this step's demonstration (SDPO's successful attempt in
            # the teacher's context), verified by the guards and its preview.
            demonstration = choice.call if choice is not None and choice.reason is None else None
            cluster = routed.item_id if routed is not None else None
            self.training.release(job_id, demonstration, examples, cluster)
        if routed is not None:
            self.listener.on_routed(routed)
        self.store.mark_applied(proposal.id, {"denied": True})
        retry = self._show_retry(task, choice) if choice is not None else None
        # The retry is shown before the step lands: it was chosen in the teacher's context,
        # not with the step's weights, and the step's job is already committed. The step
        # is announced (`continual/learned`) when it lands; the student's next turn waits
        # for it (`await_steps`).
        self._learn_in_background(proposal.id, job_id)
        return DecideOutcome(ok=True, next_proposal=retry, task_done=task.done)

    def _edit(
        self,
        task: _Task,
        proposal: Proposal,
        edited_arguments: dict[str, Any] | None,
        correction: str | None,
    ) -> DecideOutcome:
        if not edited_arguments:
            raise AgentError("an edit needs editedArguments: the call as it should be")
        edited = dict(edited_arguments)
        tool = edited.pop("tool", proposal.call.tool)
        try:
            call = ToolCall(tool=tool, arguments=edited)
            call.parsed()
        except ValidationError as exc:
            raise AgentError(f"edited call is not a valid {tool} call: {exc}") from exc
        if proposal.preview is not None:
            try:
                self.tools.check_fresh(proposal.preview)
            except ToolError as exc:
                raise AgentError(str(exc)) from exc
        diff = self._call_diff(proposal, call)
        self._record(
            proposal,
            "edit",
            correction=correction,
            edited_arguments={"tool": call.tool, **call.arguments},
            diff=diff,
        )
        job_id = self.training.enqueue(proposal.id, "edit", correction, call)
        if correction:
            routed = self.lanes.route_correction(
                correction, proposal, is_denial=True, task_text=task.text, demonstration=call
            )
            self._track_new_guard(task, routed, proposal.id)
            if routed is not None:
                self.listener.on_routed(routed)
        # The edit is the reviewer's own fix: no guard this task's corrections made may
        # block it (its preview against the file before it runs).
        for change in self._let_through(task, call, self._preview(call)[0]):
            self.listener.on_routed(change)
        result = self._execute(task, proposal, call)
        self.store.mark_applied(proposal.id, result.model_dump())
        learned = self._wait_learned(proposal.id, job_id, self._policy)
        outcome = self._next(task, result)
        outcome.learned = learned
        return outcome

    def _call_diff(self, proposal: Proposal, edited: ToolCall) -> str:
        """The correction an edit carries: a unified diff, of file content when both calls
        change the same file, else of the pretty-printed calls."""

        try:
            after = self.tools.preview(edited)
        except ToolError:
            after = None
        if proposal.preview and after:
            before_text, after_text = proposal.preview.new_content, after.new_content
            name = shown_path(after.path)
        else:
            before_text = json.dumps(
                {"tool": proposal.call.tool, **proposal.call.arguments}, indent=1, sort_keys=True
            )
            after_text = json.dumps(
                {"tool": edited.tool, **edited.arguments}, indent=1, sort_keys=True
            )
            name = "call.json"
        return unified_diff(before_text, after_text, f"a/{name} (proposed)", f"b/{name} (edited)")

    # -- turns ----------------------------------------------------------------------------

    def _execute(self, task: _Task, proposal: Proposal, call: ToolCall) -> ToolResult:
        # The preview pins what the reviewer saw, including "this file does not exist yet".
        preview = proposal.preview if call == proposal.call else None
        result = self._checkpointed(proposal.id, call, preview)
        if call.tool in FILE_CHANGING_TOOLS:
            # The workspace changed: running the tests again or re-reading the file is
            # the check of the change, not a repeat (issue 30; the curriculum does the same).
            task.executed = set()
        task.executed.add(canonical(call))
        task.history.append(call)
        task.conversation.add_call(call, result)
        task.pending = None
        task.denied = []
        task.retries = 0
        task.turn += 1
        if call.tool == "bash" and checks.runs_tests(str(call.arguments["cmd"])):
            task.failing_test = None if result.ok else str(call.arguments["cmd"])
        if call.tool == "done":
            # Approved (or edited): the task ends with the summary the reviewer accepted.
            self._finish(task, str(call.arguments["summary"]))
        return result

    def _checkpointed(
        self, proposal_id: str, call: ToolCall, preview: Preview | None
    ) -> ToolResult:
        """Run a call; a change is checkpointed (committed before it runs) for undo."""
        target = self.tools.target_path(call) if call.tool in FILE_CHANGING_TOOLS else None
        snapshot = None
        if target is not None:
            self.checkpoints.before_file(proposal_id, target)
        elif call.tool == "bash":
            snapshot = self.checkpoints.before_bash(proposal_id)
        try:
            result = self.tools.execute(call, preview=preview)
        except ToolError as exc:
            result = ToolResult(ok=False, output=f"error: {exc}")
        if target is not None:
            self.checkpoints.after_file(proposal_id, target, result.ok)
        elif snapshot is not None:
            self.checkpoints.after_bash(proposal_id, snapshot)
        return result

    def _fired(self, item_id: str | None) -> None:
        """A guard or allow rule acted on a proposal (the ledger's `fired`)."""
        if item_id is not None:
            self.store.bump(f"fired:{item_id}")

    def _runs_unasked(self, call: ToolCall, preview: Preview | None) -> str | None:
        """Why `call` (which every guard let through unchanged) runs without the reviewer
        under the autonomy setting, or None."""
        level = self.settings.autonomy
        if level == "manual":
            return None
        if call.read_only:
            return "read-only"
        if level == "read_only":
            return None
        bash_contained = call.tool != "bash" or (
            self.tools.sandbox_note(call) is None and not self.settings.allow_network
        )
        rule = self.lanes.allow_match(call, preview, str(self.workspace))
        if rule is not None and bash_contained:
            self._fired(rule.item_id)
            return f"allow rule {rule.item_id}"
        if level == "workspace_edits" and call.tool in FILE_CHANGING_TOOLS and preview:
            return "workspace edit"
        return None

    def _allow_offer(self, call: ToolCall, preview: Preview | None) -> AllowOffer | None:
        if self.settings.autonomy in ("manual", "read_only"):
            return None
        found = self.lanes.allow_offer(
            call, preview, str(self.workspace), self.settings.allow_offer_after
        )
        if found is None:
            return None
        spec, approvals = found
        return AllowOffer(rule=spec.summary(), approvals=len(approvals))

    def _next(self, task: _Task, result: ToolResult) -> DecideOutcome:
        proposal = self._advance(task)
        return DecideOutcome(ok=True, result=result, next_proposal=proposal, task_done=task.done)

    def _advance(self, task: _Task) -> Proposal | None:
        """Sample until a proposal needs the reviewer, or the task ends.

        Read-only calls are executed at once when auto-approve is on; a guard block is
        an automatic denial; a call identical to one already executed is sampled again
        (`_sample`); `done` is a proposal like any other, and approving it ends the task
        (`_execute`). When a sequence guard's step ("after changing src/ run pytest") is
        missing, a commit or a `done` is answered by proposing it.
        """
        while task.done is None:
            if task.turn >= self.settings.max_turns:
                self._finish(task, f"reached the turn limit ({self.settings.max_turns})")
                break
            call, completion, prompt_tokens, repeated = self._sample(task)
            if call is None and not repeated:
                self._finish(task, "the model could not produce a valid tool call")
                break
            # Only repeats (`done` not allowed) would end the task as `done` does.
            finishing = call is None or call.tool == "done"
            step = self._due_step(task, None if finishing else call, prompt_tokens)
            note: str | None = None
            if step is not None:
                call, completion, note = step
            elif call is None:
                self._finish(task, "stopped: the model only repeated calls already run")
                break
            preview, error = self._preview(call)
            verdict = self.lanes.check_guards(call, preview, task.history)
            self._fired(verdict.guard_id)
            if verdict.action == "rewrite" and verdict.rewritten_call is not None:
                call, note = verdict.rewritten_call, f"rewritten by a guard: {verdict.message}"
                preview, error = self._preview(call)
            candidate = Candidate(call, completion, prompt_tokens, preview, note, verdict=verdict)
            if error is not None:
                instead = self._instead_of_failed(task, candidate, error)
                if instead is None:
                    continue
                candidate = instead
            task.invalid_streak = 0
            candidate = self._checked_change(task, candidate)
            call, preview, verdict = candidate.call, candidate.preview, candidate.verdict
            assert verdict is not None
            proposal = self._add_proposal(task, candidate)
            if verdict.action == "block":
                # A guard block is an automatic denial: same record, same learning step,
                # and a chosen retry.
                return self._deny(task, proposal, verdict.message, route=False).next_proposal
            unasked = self._runs_unasked(call, preview) if verdict.action == "allow" else None
            if unasked is not None:
                self.store.record_decision(proposal.id, "approve", correction=None)
                self.store.append_event("auto_approved", {"why": unasked}, task.id, proposal.id)
                result = self._execute(task, proposal, call)
                self.store.mark_applied(proposal.id, result.model_dump())
                continue
            proposal.allow_offer = self._allow_offer(call, preview)
            self.listener.on_proposal(proposal)
            return proposal
        return None

    def _due_step(
        self, task: _Task, call: ToolCall | None, prompt_tokens: list[int]
    ) -> tuple[ToolCall, Completion, str] | None:
        """A sequence guard's missing step, as the call to propose instead of `call` (None:
        the task finishes) with its note; None when no step is due. Answered by
        proposing it, not by a denial or an end."""
        step = self.lanes.due_step(task.history, call)
        if step is None:
            return None
        note = f"`{step}` is due after this task's changes, before it " + (
            "finishes" if call is None else "commits"
        )
        instead = ToolCall(tool="bash", arguments={"cmd": step})
        tokens = self.policy.renderer.render_call(instead)
        logprobs = self.policy.logprobs(prompt_tokens, tokens)
        return instead, Completion(tokens=tokens, logprobs=logprobs, text=""), note

    def _instead_of_failed(
        self, task: _Task, failed: Candidate, error: ToolError
    ) -> Candidate | None:
        """What to show for a call that cannot run (no such file, a range past the end, a
        change that leaves a file not parsing): not worth the reviewer's time, so the
        likeliest runnable sample takes its place; else a change that only fails to parse
        is shown, marked, for the reviewer to judge; else None: it fails like an executed
        call and the model sees why (too many in a row end the task)."""
        runnable = self._runnable_instead(task, failed, error)
        if runnable is not None:
            # The screen's verdict, not one on the rewritten call: a rewrite is shown.
            assert runnable.completion is not None and runnable.verdict is not None
            return runnable
        if isinstance(error, _Unparsable):
            return replace(failed, checked=f"does not parse: {error.problem}")
        self._record_invalid(task, failed, str(error))
        task.invalid_streak += 1
        if task.invalid_streak > self.settings.max_retries:
            self._finish(
                task, f"stopped: {task.invalid_streak} calls in a row could not run ({error})"
            )
        return None

    def _checked_change(self, task: _Task, candidate: Candidate) -> Candidate:
        """A file change as checked before it is shown: `checked` says what was verified.

        It parses (`_preview` saw to that, or `checked` already says it does not). When
        the task's last test run failed, `file_candidates` changes (this one and warmer
        samples of a file change from its prompt, screened like a retry, likeliest first)
        are tried on a copy of the workspace with that test command (`trials`), and the
        first that turns it green is shown. Alternatives are drawn only then: without a
        check to tell them apart, the model's own call is the likeliest that parses.
        """
        if candidate.call.tool not in FILE_CHANGING_TOOLS or candidate.preview is None:
            return candidate
        if candidate.checked is not None:  # does not parse: nothing to try it with
            return candidate
        parses = "parses" if checks.checker(candidate.preview.path) is not None else None
        cmd = task.failing_test
        if cmd is None or self.settings.file_candidates <= 1:
            return replace(candidate, checked=parses)
        started = time.perf_counter()
        tools = [t for t in self.settings.allowed_tools or TOOL_NAMES if t in FILE_CHANGING_TOOLS]
        params = self._batch_params(task, greedy_rows=0, salt=29)
        params = params.model_copy(update={"tools": tools})
        samples = self.policy.sample_batch(
            candidate.prompt_tokens, params, self.settings.file_candidates - 1
        )
        kept, _drops = self._screen(task).all(samples, candidate.prompt_tokens)
        others = sorted(
            (c for c in kept if canonical(c.call) != canonical(candidate.call)),
            key=mean_logprob,
            reverse=True,
        )
        trial = first_passing(
            self.workspace,
            cmd,
            [candidate, *others],
            self.settings,
            env=self.tools.env,
            home=self.tools.home,
        )
        winner = trial.passed
        self.store.append_event(
            "change_checked",
            {
                "command": cmd,
                "candidates": 1 + len(others),
                "ran": trial.ran,
                "stopped": trial.stopped,
                "winner": winner.call.model_dump() if winner else None,
                "seconds": round(time.perf_counter() - started, 3),
            },
            task.id,
        )
        if winner is None:
            still = f"`{cmd}` still fails with it" if trial.stopped is None else None
            return replace(candidate, checked="; ".join(n for n in (parses, still) if n) or None)
        return replace(winner, checked="the failing test passes with this change")

    def _add_proposal(self, task: _Task, candidate: Candidate) -> Proposal:
        """Record a proposal as the task's pending one (not yet shown)."""
        call = candidate.call
        sandbox_note = self.tools.sandbox_note(call)
        proposal_id = self._store_proposal(task, candidate)
        task.pending = proposal_id
        checked = candidate.checked or self._parse_check(candidate.preview)
        if checked is not None:
            self._checked[proposal_id] = checked
            self.store.append_event("checked", {"checked": checked}, task.id, proposal_id)
        return Proposal(
            id=proposal_id,
            task_id=task.id,
            call=call,
            read_only=call.read_only,
            preview=candidate.preview,
            note="; ".join(n for n in (candidate.note, sandbox_note) if n) or None,
            adapter_version=self.training.current_version_name(),
            checked=checked,
        )

    @staticmethod
    def _parse_check(preview: Preview | None) -> str | None:
        """`checked` for a change nothing else checked (a retry, the denied call offered
        again): whether it parses, when a checker exists for its file."""
        if preview is None or checks.checker(preview.path) is None:
            return None
        problem = checks.breaks(preview.path, preview.old_content, preview.new_content)
        return "parses" if problem is None else f"does not parse: {problem}"

    def _choose_retry(self, task: _Task, denied: Proposal, correction: str) -> Candidate:
        """The retry after a correction: chosen among candidates, not just sampled.

        `retry_candidates` calls are sampled in one batch from the conversation with the
        correction (the teacher's context): the greedy call and warmer samples. A
        candidate is dropped when it repeats a denied or executed call, a guard blocks it
        (rewrites apply, as for any proposal), or its preview fails. A correction that
        spells out a literal swap ("use / instead of //") adds the sampled and denied
        calls with the swap applied, to what they replace and to what they write
        (`candidates.substituted`). The rest are ranked by the correction's lift
        (`candidates.ranked_by_lift`), ties by the teacher's log-prob, except that a swap
        applied in place comes first. With nothing left, the choice carries the one-line
        reason instead.
        """
        started, cpu_started = time.perf_counter(), time.thread_time()
        policy = self.policy
        self.training.sync_sampler(policy)
        bullets = self.lanes.bullets_for_turn(
            task.text, task.conversation.recent_calls(), task.conversation.recent_paths()
        )
        prompt_tokens = self._fit_prompt(task, bullets)
        params = self._batch_params(task, greedy_rows=1, salt=0)
        if denied.call.tool == "done":
            # "Not done" asks for more work: the retry acts, it does not finish again.
            tools = [t for t in params.tools or TOOL_NAMES if t != "done"]
            params = params.model_copy(update={"tools": tools or params.tools})
        completions = policy.sample_batch(prompt_tokens, params, self.settings.retry_candidates)
        swaps = substituted(
            policy, completions, denied.call, correction, prompt_tokens, self._range_text
        )
        completions += swaps.completions
        row = self.store.proposal(denied.id)
        student_prompt = row["prompt_tokens"] if row else prompt_tokens
        kept, drops = self._screen(task).all(completions, prompt_tokens)
        ranked = ranked_by_lift(policy, kept, student_prompt)
        summary = {
            "candidates": len(completions),
            "substituted": len(swaps.completions),
            "tokens": [len(c.tokens) for c in completions],
            "kept": len(ranked),
            "dropped": dict(drops),
            "seconds": round(time.perf_counter() - started, 3),
            # This thread's CPU time: what the choice costs on a core of its own, however
            # busy the machine (the sampler runs single-threaded by default).
            "cpu_seconds": round(time.thread_time() - cpu_started, 3),
        }
        if not ranked:
            reasons = ", ".join(f"{count} {why}" for why, count in drops.most_common())
            reason = f"No compliant retry among {len(completions)} candidates: {reasons}."
            self.store.append_event("retry_chosen", {**summary, "winner": None}, task.id)
            return Candidate(denied.call, None, prompt_tokens, denied.preview, None, reason)
        # The correction's own swap on the line the model chose is what the reviewer
        # asked for, word for word: it wins over the model's rewrites of that line, which
        # the lift can rank higher (`return 1 / values` over the fix, on the README demo).
        lift, teacher, choice = max(
            ranked,
            key=lambda entry: (
                canonical(entry[2].call) in swaps.in_place,
                entry[0] or 0.0,
                entry[1],
            ),
        )
        self.store.append_event(
            "retry_chosen",
            {**summary, "winner": choice.call.model_dump(), "lift": lift, "teacher": teacher},
            task.id,
        )
        return choice

    def _runnable_instead(
        self, task: _Task, failed: Candidate, error: ToolError
    ) -> Candidate | None:
        """The likeliest runnable call among `retry_candidates` samples from the prompt that
        gave `failed`, a call that cannot run (a range past the end, `old` text not in the
        file). Told of the failure instead, a small model mostly gives up the change (it
        runs the tests and ends), so the reviewer never sees the change it meant; among
        its own samples one usually can run. Screened like a retry (guards, preview, not
        a denied or executed call), ranked by the model's mean log-prob. The failed call
        is kept in the store as `invalid`, not in the conversation. None when no sample
        can run either."""
        params = self._batch_params(task, greedy_rows=0, salt=13)
        prompt_tokens = failed.prompt_tokens
        samples = self.policy.sample_batch(prompt_tokens, params, self.settings.retry_candidates)
        kept, drops = self._screen(task).all(samples, prompt_tokens)
        best = max(kept, key=mean_logprob, default=None)
        self.store.append_event(
            "invalid_replaced",
            {
                "call": failed.call.model_dump(),
                "error": str(error),
                "candidates": len(samples),
                "kept": len(kept),
                "dropped": dict(drops),
                "winner": best.call.model_dump() if best else None,
            },
            task.id,
        )
        if best is not None:
            self._store_proposal(task, failed, status="invalid")
        return best

    def _batch_params(self, task: _Task, *, greedy_rows: int, salt: int) -> SampleParams:
        """How a batch of candidates is sampled (a retry; the calls in place of one that
        cannot run): warm, every allowed tool, the guards' decoding limits, a seed of the
        turn (`salt` keeps the two batches of one turn apart)."""
        return SampleParams(
            temperature=self.settings.retry_temperature,
            greedy_rows=greedy_rows,
            max_tokens=self.settings.max_new_tokens,
            seed=self.settings.seed + salt + 31 * task.turn + 7 * task.retries,
            tools=self.settings.allowed_tools,
            forbid=self._decode_limits(),
        )

    def _decode_limits(self) -> DecodeRestrictions:
        """What no sampled call may say: the guards' limits, and a path to read or edit
        that names no file of the workspace (Settings.decode_paths_limit)."""
        limits = self.lanes.decode_restrictions()
        limits.files = self.tools.listed_files(self.settings.decode_paths_limit)
        return limits

    def _screen(self, task: _Task) -> Screen:
        """What a candidate for `task`'s next proposal must pass (`candidates.Screen`)."""
        return Screen(
            parse=self.policy.renderer.parse_call,
            preview=self._preview,
            check_guards=lambda call, preview: self.lanes.check_guards(call, preview, task.history),
            denied={canonical(c) for c in self._denied_calls(task).values()},
            executed=task.executed,
        )

    def _show_retry(self, task: _Task, choice: Candidate) -> Proposal:
        """Show the chosen retry; when there is none, the denied call again with the reason
        and the Edit offer, so a correction never ends a task silently. The chosen retry
        is shown even when read-only: it answers the correction."""
        blocked = None
        if choice.completion is None:
            tokens = self.policy.renderer.render_call(choice.call)
            logprobs = self.policy.logprobs(choice.prompt_tokens, tokens)
            verdict = self.lanes.check_guards(choice.call, choice.preview, task.history)
            blocked = verdict.message if verdict.action == "block" else None
            offer = (
                "A guard blocks this call: edit it to show what you want, override the "
                "guard, or deny it again."
                if blocked
                else "Edit this call to show what you want, or deny it again."
            )
            choice = replace(
                choice,
                completion=Completion(tokens=tokens, logprobs=logprobs, text=""),
                note=f"{choice.reason} {offer}",
            )
        proposal = self._add_proposal(task, choice)
        proposal.blocked_by = blocked
        self.listener.on_proposal(proposal)
        return proposal

    def _record_invalid(self, task: _Task, failed: Candidate, error: str) -> None:
        self._store_proposal(task, failed, status="invalid")
        task.conversation.add_call(failed.call, ToolResult(ok=False, output=f"error: {error}"))
        task.turn += 1

    def _store_proposal(self, task: _Task, candidate: Candidate, status: str = "pending") -> str:
        call, completion, preview = candidate.call, candidate.completion, candidate.preview
        assert completion is not None  # a retry without one is given one before it is shown
        return self.store.add_proposal(
            task.id,
            task.turn,
            call.tool,
            call.arguments,
            candidate.prompt_tokens,
            completion.tokens,
            completion.logprobs,
            preview.model_dump() if preview else None,
            self.training.current_version_name(),
            status=status,
        )

    def _range_text(self, call: ToolCall) -> str | None:
        """The text an edit_lines call's range holds now (None for another tool, or a
        file or range that is not there)."""
        if call.tool != "edit_lines":
            return None
        try:
            preview = self.tools.preview(call)  # the file as the tool reads it
        except ToolError:
            return None
        if preview is None or preview.old_content is None:
            return None
        lines = split_lines(preview.old_content)
        start, end = call.arguments["start"], call.arguments["end"]
        if not 1 <= start <= end <= len(lines):
            return None
        return "".join(lines[start - 1 : end]).removesuffix("\n").removesuffix("\r")

    def _preview(self, call: ToolCall) -> tuple[Preview | None, ToolError | None]:
        """The call's preview (computed once per proposal), or why it cannot run.

        A change that leaves the file as it is counts as one that cannot run: approving it
        would do nothing, and a small model's favourite retry is the old line copied back.
        So does one that leaves a file that parsed not parsing (`tools.checks`): it comes
        with its preview, as `_Unparsable`.
        """
        try:
            preview = self.tools.preview(call)
        except ToolError as exc:
            return None, exc
        if preview is not None and preview.old_content == preview.new_content:
            return None, ToolError(f"{call.tool} would leave {preview.path} as it is")
        if preview is not None:
            problem = checks.breaks(preview.path, preview.old_content, preview.new_content)
            if problem is not None:
                # The preview stays: the guards judge it, and it is shown, marked, when no
                # other candidate parses (`_instead_of_failed`).
                message = f"{call.tool} would leave {preview.path} not parsing ({problem})"
                return preview, _Unparsable(message, problem)
        return preview, None

    def _sample(self, task: _Task) -> tuple[ToolCall | None, Completion, list[int], bool]:
        """A call for the turn, or None when no try gave a valid, new one (and whether the
        tries only repeated calls already run).

        A repeat is sampled again, warmer. When the first two tries only repeat, the last
        is decoded under a narrowed grammar: with nothing done yet (only looks), it may
        only act, so a task never ends on its first look with nothing shown; else it may
        only be `done`, in the model's own words. A model that keeps repeating what it
        ran has nothing new to do, which is what `done` says, and the reviewer, not the
        repeat, decides whether the task is finished ("not done: the test still fails" is
        a correction like any other). This is the fallback for weights never trained to
        say `done` (the shipped starter, until it is); without it such tasks would run
        to the turn limit. When `done` is not an allowed tool, the last try is not
        narrowed.
        """
        policy = self.policy
        self.await_steps()
        # A step may have landed in the background (a resumed job, a timed-out wait):
        # sample from the version the proposal will be labelled with.
        self.training.sync_sampler(policy)
        bullets = self.lanes.bullets_for_turn(
            task.text, task.conversation.recent_calls(), task.conversation.recent_paths()
        )
        prompt_tokens = self._fit_prompt(task, bullets)
        completion = Completion(tokens=[], logprobs=[], text="")
        forbid = self._decode_limits()
        repeats = 0
        for attempt in range(3):
            tools = self.settings.allowed_tools
            if attempt == 2 and repeats == 2:
                tools = self._last_try_tools(task, tools)
            params = SampleParams(
                temperature=self.settings.temperature if attempt == 0 else 0.8,
                max_tokens=self.settings.max_new_tokens,
                seed=self.settings.seed + attempt + 31 * task.turn + 7 * task.retries,
                tools=tools,
                forbid=forbid,
            )
            completion = policy.sample(prompt_tokens, params)
            try:
                call = policy.renderer.parse_call(completion.text)
            except ValueError as exc:
                self.store.append_event(
                    "parse_error", {"text": completion.text, "error": str(exc)}, task_id=task.id
                )
                continue
            if _repeats(task, call):
                # Already ran: the model may be done, or stuck re-reading a file (a 135M
                # model often is).
                self.store.append_event("repeat_of_executed", {"call": call.model_dump()}, task.id)
                repeats += 1
                continue
            return call, completion, prompt_tokens, False
        return None, completion, prompt_tokens, repeats == 3

    @staticmethod
    def _last_try_tools(task: _Task, tools: list[str] | None) -> list[str] | None:
        """The tools of a turn's last try after two repeats (`_sample`)."""
        allowed = list(tools or TOOL_NAMES)
        if all(c.read_only for c in task.history):
            acting = [t for t in allowed if t not in READ_ONLY_TOOLS and t != "done"]
            return acting or tools
        return ["done"] if "done" in allowed else tools

    def _fit_prompt(self, task: _Task, bullets: list[str]) -> list[int]:
        """The turn's prompt, dropping the oldest calls (summarised in one line) until it
        and the call fit the model's context window."""
        renderer = self.policy.renderer
        window = self.policy.context_window
        room = window - self.settings.max_new_tokens
        keep = KEEP_CALLS
        while True:
            tokens = renderer.render_prompt(task.conversation.messages(bullets, keep=keep))
            if len(tokens) <= room:
                return tokens
            if keep == 0:
                raise AgentError(
                    f"the task and its rules need {len(tokens)} tokens, more than the "
                    f"model's window leaves for a prompt ({room}); shorten the task text"
                )
            keep -= 1

    def _denied_calls(self, task: _Task) -> dict[str, ToolCall]:
        """The calls denied in the current turn, by proposal id."""
        calls = {}
        for pid in task.denied:
            row = self.store.proposal(pid)
            if row is not None:
                calls[pid] = ToolCall(tool=row["tool"], arguments=row["arguments"])
        return calls

    def _finish(self, task: _Task, summary: str) -> None:
        task.done = summary
        task.pending = None
        self.store.set_task_status(task.id, "done", summary)
        self.listener.on_task_done(TaskDoneNotification(task_id=task.id, summary=summary))

    def _wait_learned(
        self, proposal_id: str, job_id: int | None, policy: Sampler | None
    ) -> LearnedPayload | None:
        """Wait for a decision's step and announce it; with `policy` (the agent's lock
        held), the sampler serves the new version at once."""
        if job_id is None:
            return None
        note = self.training.wait(job_id, proposal_id, self.listener, policy)
        if note is None:
            return None
        self.listener.on_learned(note)
        return LearnedPayload(step=note.step, loss=note.loss, seconds=note.seconds)

    def _learn_in_background(self, proposal_id: str, job_id: int | None) -> None:
        """Hand a denial's step to `_land_steps`, which waits for it without the agent's
        lock (so without touching the sampler: `_sample` swaps it in under the lock)."""
        if job_id is None:
            return
        if self._lander is None:
            self._lander = threading.Thread(
                target=self._land_steps, name="continual-learned", daemon=True
            )
            self._lander.start()
        self._landings.put((proposal_id, job_id))

    def _land_steps(self) -> None:
        """Wait for each step in turn, on one thread for the agent's life (the steps land
        in the order the reviewer gave the corrections)."""
        while (item := self._landings.get()) is not None:
            try:
                self._wait_learned(*item, None)
            except Exception:  # a thread's error reaches no caller: the log keeps it
                log.exception("waiting for the step of %s failed", item[0])
            finally:
                self._landings.task_done()
        self._landings.task_done()

    def await_steps(self) -> None:
        """Wait for the denials' steps still running (each up to the wait limit). Before
        the student samples a turn, so what it proposes after a correction comes from the
        weights that learned it; and before a headless run closes, so its steps land."""
        self._landings.join()

    # -- crash recovery -------------------------------------------------------------------

    def _recover(self) -> None:
        """Finish what committed decisions started before a crash.

        File changes are re-applied only when the file still holds exactly the content
        the proposal was computed against; a bash call is never re-run blindly.
        """
        for decision in self.store.pending_decisions():
            pid = decision["proposal_id"]
            row = self.store.proposal(pid)
            if row is None:
                continue
            outcome: dict[str, Any] = {"recovered": True}
            if decision["decision"] in ("deny", "edit") and not self.training.has_job(pid):
                call = None
                if decision["edited_arguments"]:
                    args = dict(decision["edited_arguments"])
                    call = ToolCall(tool=args.pop("tool", row["tool"]), arguments=args)
                self.training.enqueue_from_row(row, decision, call)
            if decision["decision"] in ("approve", "edit", "override"):
                outcome.update(self._recover_execution(row, decision))
            self.store.mark_applied(pid, outcome)
        self.checkpoints.recover()
        self.training.resume()

    def _recover_execution(self, row: dict[str, Any], decision: dict[str, Any]) -> dict[str, Any]:
        args = decision["edited_arguments"] or {"tool": row["tool"], **row["arguments"]}
        args = dict(args)
        call = ToolCall(tool=args.pop("tool", row["tool"]), arguments=args)
        if call.tool == "bash":
            return {"ok": False, "output": "interrupted by a crash; bash is not re-run"}
        if call.tool == "done":
            self.store.set_task_status(row["task_id"], "done", str(call.arguments["summary"]))
            return {"ok": True, "output": "task finished"}
        if call.read_only:
            return {"ok": True, "output": "read-only call; nothing to recover"}
        if not row["preview"]:
            return {"ok": False, "output": "not applied after the crash: no preview to check"}
        # Whatever the reviewer approved or edited was computed against the file the
        # proposal's preview saw: it is replayed only onto exactly those bytes.
        proposed = Preview.model_validate(row["preview"])
        try:
            if decision["edited_arguments"]:
                if self.tools.target_path(call) != proposed.path:
                    return {
                        "ok": False,
                        "output": "not applied after the crash: the edited "
                        "call changes another file, whose state at the decision is unknown",
                    }
                self.tools.check_fresh(proposed)
                result = self.tools.execute(call)
            elif self.tools.already_applied(proposed):
                return {"ok": True, "output": "already applied before the crash"}
            else:
                result = self.tools.execute(call, preview=proposed)
            return result.model_dump()
        except ToolError as exc:
            return {"ok": False, "output": f"not applied after the crash: {exc}"}
