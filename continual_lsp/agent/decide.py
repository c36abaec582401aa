"""The reviewer's decisions: approve, deny, edit, override, undo, allow.

Order of work for every decision (the durability rule of DESIGN §1): commit the decision
to the store, then execute / enqueue training / route the correction, then mark it
applied. A crash anywhere after the commit is repaired by `recovery.recover` on the next
start. An accepted call ends its turn; the next turn is the Agent's to start
(`turns.next_turn`), so a decision never samples.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import ValidationError

from continual_lsp.agent import calls, retry
from continual_lsp.agent.candidates import Candidate
from continual_lsp.agent.checkpoints import UndoError
from continual_lsp.agent.errors import AgentError
from continual_lsp.agent.parts import Parts, Task
from continual_lsp.agent.proposal import DecideOutcome, Proposal
from continual_lsp.protocol import AllowResult, HunkDecision, RoutedNotification, UndoResult
from continual_lsp.protocol import Learned as LearnedPayload
from continual_lsp.store import StoreError
from continual_lsp.text import shown_path, unified_diff
from continual_lsp.tools import hunks as hunk_spans
from continual_lsp.tools.base import Preview, ToolCall, ToolError, ToolResult


def pending(parts: Parts, proposal_id: str) -> tuple[Task, Proposal]:
    """The proposal a decision is about, which must be its open task's pending one."""
    row = parts.store.proposal(proposal_id)
    if row is None:
        raise AgentError(f"unknown proposal {proposal_id!r}")
    if row["status"] != "pending":
        raise AgentError(f"proposal {proposal_id!r} was already {row['status']}")
    task = parts.tasks.get(row["task_id"])
    if task is None or task.pending != proposal_id:
        raise AgentError(
            f"proposal {proposal_id!r} belongs to a task that is no longer open in this session"
        )
    proposal = calls.load_proposal(parts, proposal_id)
    assert proposal is not None
    return task, proposal


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
    text = "; ".join(([correction.strip()] if correction and correction.strip() else []) + reasons)
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


def _record(parts: Parts, proposal: Proposal, decision: str, **kwargs: Any) -> None:
    try:
        parts.store.record_decision(proposal.id, decision, **kwargs)
    except StoreError as exc:
        raise AgentError(str(exc)) from exc


def _check_fresh(parts: Parts, task: Task, proposal: Proposal) -> None:
    """Refuse a proposal whose file changed since it was made (it is stale now)."""
    if proposal.preview is not None:
        try:
            parts.tools.check_fresh(proposal.preview)
        except ToolError as exc:
            parts.store.set_proposal_status(proposal.id, "stale")
            task.pending = None
            raise AgentError(str(exc)) from exc


def approve(parts: Parts, task: Task, proposal: Proposal) -> ToolResult:
    _check_fresh(parts, task, proposal)
    verdict = parts.lanes.check_guards(proposal.call, proposal.preview, task.history)
    calls.fired(parts.store, verdict.guard_id)
    if verdict.action == "block":
        # A guard compiled after the call was proposed (or the denied call offered
        # again for editing): approving cannot bypass it; overriding can, and says so.
        raise AgentError(
            f"a guard blocks this call: {verdict.message} Edit it, deny it, or override "
            'the guard (decision "override").'
        )
    _record(parts, proposal, "approve")
    result = _run_accepted(parts, task, proposal)
    _learn_allow(parts, proposal)
    return result


def _run_accepted(parts: Parts, task: Task, proposal: Proposal) -> ToolResult:
    """Run an approved or overridden call (its decision already committed)."""
    denied = [
        pid for pid, call in calls.denied_calls(parts.store, task).items() if call != proposal.call
    ]
    result = calls.execute(parts, task, proposal, proposal.call)
    # The approved retry is the demonstration the denied turns lacked (DESIGN §4); the
    # reviewer approving a call they denied earlier is no demonstration for that denial.
    for denied_id in denied:
        parts.training.enqueue(denied_id, "approved_retry", None, proposal.call)
    parts.store.mark_applied(proposal.id, result.model_dump())
    return result


def override(parts: Parts, task: Task, proposal: Proposal) -> ToolResult:
    """Run a call a guard blocks: the reviewer knows better than the guard. The
    override counts against the guard (twice retires it to CONTEXT), and a guard
    compiled from this task's denials is narrowed or dropped for it."""
    _check_fresh(parts, task, proposal)
    verdict = parts.lanes.check_guards(proposal.call, proposal.preview, task.history)
    if verdict.action != "block" or verdict.guard_id is None:
        raise AgentError(f"no guard blocks proposal {proposal.id}: approve it instead")
    _record(parts, proposal, "override", correction=verdict.message)
    # What the override teaches the guards is committed before the call runs: a call that
    # runs long (or a server that dies under it) must not leave the count behind.
    changes = _let_through(parts, task, proposal.call, proposal.preview)
    retired = parts.lanes.guard_overridden(verdict.guard_id, proposal.id)
    for change in [*changes, *([retired] if retired else [])]:
        parts.listener.on_routed(change)
    return _run_accepted(parts, task, proposal)


def _let_through(
    parts: Parts, task: Task, call: ToolCall, preview: Preview | None
) -> list[RoutedNotification]:
    """The guards compiled from this task's denials that would block `call`, which the
    reviewer accepted, narrowed or dropped (DESIGN §5); `preview` against the files as
    they are before it runs."""
    if not task.new_guards:
        return []
    path = call.arguments.get("path") or call.arguments.get("cmd")
    what = f"{call.tool} {path}" if isinstance(path, str) else call.tool
    return parts.lanes.let_through(task.new_guards, call, preview, task.history, what)


def _track_new_guard(
    parts: Parts, task: Task, routed: RoutedNotification | None, source: str
) -> None:
    """Remember a guard compiled from `source`, a denial in `task`."""
    if routed is None or routed.lane != "CODE":
        return
    row = parts.store.lane_item(routed.item_id)
    if row is not None and row.get("source") == source and routed.item_id not in task.new_guards:
        task.new_guards.append(routed.item_id)


def _learn_allow(parts: Parts, proposal: Proposal) -> None:
    """With `allow_learn_after` set, that many approvals of a class become its rule."""
    settings = parts.settings
    after = settings.allow_learn_after
    if after is None or settings.autonomy in ("manual", "read_only"):
        return
    ws = str(parts.workspace)
    if parts.lanes.allow_offer(proposal.call, proposal.preview, ws, after) is not None:
        item_id, _rule = parts.lanes.add_allow_rule(
            proposal.call, proposal.preview, ws, proposal.id, learned=True
        )
        parts.store.append_event("allow_learned", {"itemId": item_id}, proposal.task_id)


def deny(
    parts: Parts, task: Task, proposal: Proposal, correction: str, route: bool = True
) -> DecideOutcome:
    """Deny with a correction: the step is committed with the denial, the correction
    routed, and the retry chosen in the teacher's context and shown before the step
    lands. A guard's block is a denial too (`route` False: it is a CODE item already)."""
    if not correction:
        raise AgentError("a denial needs a correction: say what the agent should do instead")
    _record(parts, proposal, "deny", correction=correction)
    # The step's job is committed with the denial, held until its demonstration (the
    # chosen retry) is known: whatever fails or crashes after this, the step runs.
    job_id = parts.training.enqueue(proposal.id, "deny", correction, None, held=True)
    task.pending = None
    choice: Candidate | None = None
    routed: RoutedNotification | None = None
    examples: list[ToolCall] = []
    try:
        # A guard's own block message is already a CODE item: routing it again would
        # only duplicate it. Routed before the retry is chosen, so a guard compiled
        # from this very correction already screens the candidates; and the
        # correction's cluster says which earlier approved calls the teacher may see.
        if route:
            routed = parts.lanes.route_correction(correction, proposal, is_denial=True)
            _track_new_guard(parts, task, routed, proposal.id)
        task.denied.append(proposal.id)
        task.conversation.add_feedback(correction)
        task.retries += 1
        max_retries = parts.settings.max_retries
        if task.retries > max_retries:
            calls.finish(parts, task, f"stopped after {max_retries} denied retries")
        else:
            choice = retry.choose_retry(parts, task, proposal, correction)
        if routed is not None:
            examples = parts.lanes.cluster_demonstrations(routed.item_id, exclude=proposal.id)
    finally:
        # The chosen retry is this step's demonstration (SDPO's successful attempt in
        # the teacher's context), verified by the guards and its preview.
        demonstration = choice.call if choice is not None and choice.reason is None else None
        cluster = routed.item_id if routed is not None else None
        parts.training.release(job_id, demonstration, examples, cluster)
    if routed is not None:
        parts.listener.on_routed(routed)
    parts.store.mark_applied(proposal.id, {"denied": True})
    shown = retry.show_retry(parts, task, choice) if choice is not None else None
    # The retry is shown before the step lands: it was chosen in the teacher's context,
    # not with the step's weights, and the step's job is already committed. The step
    # is announced (`continual/learned`) when it lands; the student's next turn waits
    # for it (`sampling.sample`).
    parts.landing.in_background(proposal.id, job_id)
    return DecideOutcome(ok=True, next_proposal=shown, task_done=task.done)


def edit(
    parts: Parts,
    task: Task,
    proposal: Proposal,
    edited_arguments: dict[str, Any] | None,
    correction: str | None,
) -> tuple[ToolResult, LearnedPayload | None]:
    """Run the reviewer's own version of the call; its step is waited for (the lock
    held), so the next turn samples from weights that learned the edit."""
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
            parts.tools.check_fresh(proposal.preview)
        except ToolError as exc:
            raise AgentError(str(exc)) from exc
    diff = _call_diff(parts, proposal, call)
    _record(
        parts,
        proposal,
        "edit",
        correction=correction,
        edited_arguments={"tool": call.tool, **call.arguments},
        diff=diff,
    )
    job_id = parts.training.enqueue(proposal.id, "edit", correction, call)
    if correction:
        routed = parts.lanes.route_correction(
            correction, proposal, is_denial=True, task_text=task.text, demonstration=call
        )
        _track_new_guard(parts, task, routed, proposal.id)
        if routed is not None:
            parts.listener.on_routed(routed)
    # The edit is the reviewer's own fix: no guard this task's corrections made may
    # block it (its preview against the file before it runs).
    before_run = calls.preview(parts.tools, call)[0]
    for change in _let_through(parts, task, call, before_run):
        parts.listener.on_routed(change)
    result = calls.execute(parts, task, proposal, call)
    parts.store.mark_applied(proposal.id, result.model_dump())
    learned = parts.landing.wait(proposal.id, job_id, parts.sampler.built)
    return result, learned


def _call_diff(parts: Parts, proposal: Proposal, edited: ToolCall) -> str:
    """The correction an edit carries: a unified diff, of file content when both calls
    change the same file, else of the pretty-printed calls."""
    try:
        after = parts.tools.preview(edited)
    except ToolError:
        after = None
    if proposal.preview and after:
        before_text, after_text = proposal.preview.new_content, after.new_content
        name = shown_path(after.path)
    else:
        before_text = json.dumps(
            {"tool": proposal.call.tool, **proposal.call.arguments}, indent=1, sort_keys=True
        )
        after_text = json.dumps({"tool": edited.tool, **edited.arguments}, indent=1, sort_keys=True)
        name = "call.json"
    return unified_diff(before_text, after_text, f"a/{name} (proposed)", f"b/{name} (edited)")


def undo(parts: Parts, proposal_id: str | None, reason: str | None) -> UndoResult:
    """Restore what an applied change replaced (the latest when no id): a late denial.

    Refused, with nothing touched, when a file changed since the change; the undo is
    committed before any file is restored, then trains and routes like a denial."""
    store = parts.store
    target = proposal_id or parts.checkpoints.latest()
    if target is None:
        raise AgentError("nothing to undo: no applied change has a checkpoint")
    row = store.proposal(target)
    if row is None:
        raise AgentError(f"unknown proposal {target!r}")
    try:
        files = parts.checkpoints.check(target)
    except UndoError as exc:
        raise AgentError(str(exc)) from exc
    reason = (reason or "").strip()
    correction = reason or f"The reviewer undid this {row['tool']} call."
    store.append_event(
        "undo", {"reason": reason or None, "paths": sorted(files)}, row["task_id"], target
    )
    # The lesson is queued before the files change: a client that sees them restored
    # may shut the server down at once (the Neovim review e2e did, under load, and the
    # undo's job was never written).
    parts.training.enqueue(target, "deny", correction, None)
    restored = parts.checkpoints.restore(target, files)
    store.set_proposal_status(target, "undone")
    proposal = calls.load_proposal(parts, target)
    assert proposal is not None
    if reason:
        routed = parts.lanes.route_correction(reason, proposal, is_denial=True)
        if routed is not None:
            parts.listener.on_routed(routed)
    task = parts.tasks.get(row["task_id"])
    if task is not None and task.done is None:
        task.conversation.add_feedback(
            f"The reviewer undid your {row['tool']} call ({', '.join(restored)}): {correction}"
        )
    return UndoResult(ok=True, proposal_id=target, restored=restored)


def allow(parts: Parts, proposal: Proposal) -> AllowResult:
    """ "Always allow calls like this one": an allow rule in the CODE lane."""
    try:
        item_id, rule = parts.lanes.add_allow_rule(
            proposal.call, proposal.preview, str(parts.workspace), proposal.id, False
        )
    except ValueError as exc:
        raise AgentError(f"calls like this cannot be always allowed: {exc}") from exc
    return AllowResult(ok=True, item_id=item_id, rule=rule)
