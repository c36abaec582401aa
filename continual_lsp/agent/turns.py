"""The turn loop: a task opened (`start`), then turns sampled until one needs the reviewer
or the task ends (`advance`): a guard's rewrite or block applied, a call that cannot run
replaced, a change put where the task says the work is, a file change checked, a call the
autonomy setting allows run unasked."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import PurePosixPath

from continual_lsp.agent import calls, decide, grounding, retry, trials
from continual_lsp.agent.candidates import Candidate, canonical, mean_logprob
from continual_lsp.agent.conversation import Conversation
from continual_lsp.agent.errors import AgentError, Unparsable
from continual_lsp.agent.parts import Parts, Task
from continual_lsp.agent.proposal import DecideOutcome, Proposal
from continual_lsp.agent.sampling import batch_params, sample
from continual_lsp.agent.trials import Trial, first_passing
from continual_lsp.config import Settings
from continual_lsp.policy.base import Completion, DecodeRestrictions, SampleParams
from continual_lsp.tools import checks
from continual_lsp.tools.base import (
    FILE_CHANGING_TOOLS,
    TOOL_NAMES,
    Preview,
    ToolCall,
    ToolError,
    ToolResult,
)


def start(parts: Parts, text: str, files: Sequence[str]) -> tuple[str, Proposal | None]:
    """Open a task with `files` read into its conversation first, as executed reads, and
    sample its first proposal. A file that cannot be read fails before the task exists."""
    reads = [_read_in_view(parts, path) for path in files]
    task_id = parts.store.create_task(text, str(parts.workspace))
    task = Task(task_id, text, Conversation(text))
    parts.tasks[task_id] = task
    for call, result in reads:
        parts.store.append_event("in_view", {"path": call.arguments["path"]}, task_id)
        task.executed.add(canonical(call))
        task.history.append(call)
        task.conversation.add_call(call, result)
    return task_id, advance(parts, task)


def _read_in_view(parts: Parts, path: str) -> tuple[ToolCall, ToolResult]:
    try:
        rel = parts.tools.rel(parts.tools.resolve(path))
        call = ToolCall(tool="read", arguments={"path": rel})
        return call, parts.tools.execute(call)
    except ToolError as exc:
        raise AgentError(f"cannot start with {path} in view: {exc}") from exc


def next_turn(parts: Parts, task: Task, result: ToolResult) -> DecideOutcome:
    """The outcome of an accepted call: its result and the next turn's proposal."""
    proposal = advance(parts, task)
    return DecideOutcome(ok=True, result=result, next_proposal=proposal, task_done=task.done)


def advance(parts: Parts, task: Task) -> Proposal | None:
    """Sample until a proposal needs the reviewer, or the task ends.

    Read-only calls are executed at once when auto-approve is on; a guard block is
    an automatic denial; a call identical to one already executed is sampled again
    (`sampling.sample`); `done` is a proposal like any other, and approving it ends the
    task (`calls.execute`). A change away from what the task names is moved there or
    waits for a look at it (`_grounded`). When a sequence guard's step ("after changing
    src/ run pytest") is missing, a commit or a `done` is answered by proposing it.
    """
    settings, store = parts.settings, parts.store
    while task.done is None:
        if task.turn >= settings.max_turns:
            calls.finish(parts, task, f"reached the turn limit ({settings.max_turns})")
            break
        call, completion, prompt_tokens, repeated = sample(parts, task)
        if call is None and not repeated:
            calls.finish(parts, task, "the model could not produce a valid tool call")
            break
        # Only repeats (`done` not allowed) would end the task as `done` does.
        finishing = call is None or call.tool == "done"
        step = _due_step(parts, task, None if finishing else call, prompt_tokens)
        note: str | None = None
        if step is not None:
            call, completion, note = step
        elif call is None:
            calls.finish(parts, task, "stopped: the model only repeated calls already run")
            break
        candidate, error = retry.screen(parts, task).vet(call, completion, prompt_tokens)
        if note is not None:
            candidate.note = "; ".join(n for n in (note, candidate.note) if n)
        assert candidate.verdict is not None
        calls.fired(store, candidate.verdict.guard_id)
        if error is not None:
            instead = _instead_of_failed(parts, task, candidate, error)
            if instead is None:
                continue
            candidate = instead
        if step is None and (grounded := _grounded(parts, task, candidate)) is not None:
            candidate = grounded
        task.invalid_streak = 0
        candidate = _checked_change(parts, task, candidate)
        call, preview, verdict = candidate.call, candidate.preview, candidate.verdict
        assert verdict is not None
        proposal = calls.add_proposal(parts, task, candidate)
        if verdict.action == "block":
            # A guard block is an automatic denial: same record, same learning step,
            # and a chosen retry.
            return decide.deny(parts, task, proposal, verdict.message, route=False).next_proposal
        unasked = _runs_unasked(parts, call, preview) if verdict.action == "allow" else None
        if unasked is not None:
            store.record_decision(proposal.id, "approve", correction=None)
            store.append_event("auto_approved", {"why": unasked}, task.id, proposal.id)
            result = calls.execute(parts, task, proposal, call)
            store.mark_applied(proposal.id, result.model_dump())
            continue
        proposal.allow_offer = calls.allow_offer(parts, call, preview)
        parts.listener.on_proposal(proposal)
        return proposal
    return None


def _due_step(
    parts: Parts, task: Task, call: ToolCall | None, prompt_tokens: list[int]
) -> tuple[ToolCall, Completion, str] | None:
    """A sequence guard's missing step, as the call to propose instead of `call` (None:
    the task finishes) with its note; None when no step is due. Answered by
    proposing it, not by a denial or an end."""
    step = parts.lanes.due_step(task.history, call)
    if step is None:
        return None
    note = f"`{step}` is due after this task's changes, before it " + (
        "finishes" if call is None else "commits"
    )
    instead = ToolCall(tool="bash", arguments={"cmd": step})
    return instead, _forced(parts, instead, prompt_tokens), note


def _grounded(parts: Parts, task: Task, candidate: Candidate) -> Candidate | None:
    """The model's change put where the task says the work is (`grounding`): its new
    file moved to the path the task names; or a listing of the folder where the failing
    check found a file missing (`_missing_listing`), unless the change writes that
    file; or a read of the place the task names. None when it is there already (or the
    other call cannot run)."""
    tools, call = parts.tools, candidate.call
    if call.tool not in FILE_CHANGING_TOOLS:
        return None
    if candidate.verdict is not None and candidate.verdict.action == "block":
        return None  # a guard's block is the reviewer's word: it stays a denial
    moved = grounding.moved_write(tools, task.text, call)
    listing = None if moved is not None else _missing_listing(task)
    if moved is not None:
        instead = moved
        note = (
            f"written where the task puts the new file (the model wrote {call.arguments['path']})"
        )
    elif listing is not None and tools.target_path(call) not in task.missing_files:
        instead, missing = listing
        note = f"`{task.failing_check}` found no {missing}: what its folder holds, first"
    else:
        seen = calls.seen_paths(tools, task)
        path = grounding.place_to_look(tools, task.text, call, candidate.preview, seen)
        if path is None:
            return None
        instead = ToolCall(tool="read", arguments={"path": path})
        note = (
            f"a look at {path}, where the task's work is, before the model's change to "
            f"{tools.target_path(call)}"
        )
    shown = _look(parts, task, instead, candidate.prompt_tokens, note)
    if shown is not None:
        parts.store.append_event(
            "grounded", {"call": call.model_dump(), "instead": shown.call.model_dump()}, task.id
        )
    return shown


def _missing_listing(task: Task) -> tuple[ToolCall, str] | None:
    """A glob of the folder of a file the failing check says is missing, with that
    file, when this task has not listed it: the file is often there under another name
    (a program that opens `data/summit.txt` beside `data/summit_orchard.txt`), and the
    model, not shown the folder, guesses names (dev draw: four renames in a row)."""
    for missing in task.missing_files:
        folder = PurePosixPath(missing).parent
        call = ToolCall(
            tool="glob", arguments={"pat": "*" if str(folder) == "." else f"{folder}/*"}
        )
        if canonical(call) not in task.executed:
            return call, missing
    return None


def _look(
    parts: Parts, task: Task, call: ToolCall, prompt_tokens: list[int], note: str
) -> Candidate | None:
    """`call`, chosen by the agent, as the candidate to show with `note`; None when it
    cannot run or a guard blocks it. Scored only once chosen: a log-prob pass each."""
    candidate, error = retry.screen(parts, task).vet(call, None, prompt_tokens)
    assert candidate.verdict is not None
    if error is not None or candidate.verdict.action == "block":
        return None
    completion = _forced(parts, candidate.call, prompt_tokens)
    return replace(candidate, completion=completion, note=note)


def _forced(parts: Parts, call: ToolCall, prompt_tokens: list[int]) -> Completion:
    """`call` as a completion the agent chose, not the model: its tokens and the model's
    log-probs of them (the proposal's record and any training step need both)."""
    tokens = parts.policy.renderer.render_call(call)
    return Completion(tokens=tokens, logprobs=parts.policy.logprobs(prompt_tokens, tokens), text="")


def _instead_of_failed(
    parts: Parts, task: Task, failed: Candidate, error: ToolError
) -> Candidate | None:
    """What to show for a call that cannot run (no such file, a range past the end, a
    change that leaves a file not parsing): not worth the reviewer's time, so the
    likeliest runnable sample takes its place; else None: it fails like an executed
    call and the model sees why (too many in a row end the task). A change that only
    fails to parse is shown, marked, for the reviewer to judge once the model, told
    the parser's words `max_retries` times in a row, still wrote none that parses: an
    approve-all reviewer left a file not parsing where the model's next try, with the
    error in view, could have mended it (agent-skill bench)."""
    runnable = retry.runnable_instead(parts, task, failed, error)
    if runnable is not None:
        # The screen's verdict, not one on the rewritten call: a rewrite is shown.
        assert runnable.completion is not None and runnable.verdict is not None
        return runnable
    if isinstance(error, Unparsable) and task.invalid_streak >= parts.settings.max_retries:
        return replace(failed, checked=f"does not parse: {error.problem}")
    _record_invalid(parts, task, failed, str(error))
    task.invalid_streak += 1
    if task.invalid_streak > parts.settings.max_retries:
        calls.finish(
            parts, task, f"stopped: {task.invalid_streak} calls in a row could not run ({error})"
        )
    return None


def _record_invalid(parts: Parts, task: Task, failed: Candidate, error: str) -> None:
    calls.store_proposal(parts, task, failed, status="invalid")
    task.conversation.add_call(failed.call, ToolResult(ok=False, output=f"error: {error}"))
    task.turn += 1


def _checked_change(parts: Parts, task: Task, candidate: Candidate) -> Candidate:
    """A file change, or a `done`, as checked before it is shown: `checked` says what was
    verified.

    A change parses (`calls.preview` saw to that, or `checked` already says it does not).
    When the task's check (a test run, the command the task names) last failed, changes
    are tried against it (`_tried`) and the first that turns it green is shown: for a
    file change, this one or a warmer sample of one; for `done`, which the check says
    is premature, a change sampled in its place. A `done` with no such change is shown as
    the model's own, marked. Alternatives are drawn only then: without a check to tell
    them apart, the model's own call is the likeliest that parses, and a change nothing
    verified is never put in place of a `done`.
    """
    cmd = task.failing_check
    if candidate.call.tool == "done":
        if cmd is None:
            return candidate
        look = _look_at_failure(parts, task, cmd, candidate.prompt_tokens)
        if look is not None:
            return look
        fix = _tried(parts, task, cmd, candidate.prompt_tokens, None).passed
        if fix is None:
            return replace(candidate, checked=f"`{cmd}` failed on its last run")
        note = f"in place of `done`: `{cmd}` failed on its last run"
        return replace(fix, note="; ".join(n for n in (fix.note, note) if n))
    if candidate.call.tool not in FILE_CHANGING_TOOLS or candidate.preview is None:
        return candidate
    if candidate.checked is not None:  # does not parse: nothing to try it with
        return candidate
    parses = "parses" if checks.checker(candidate.preview.path) is not None else None
    if cmd is None:
        return replace(candidate, checked=parses)
    trial = _tried(parts, task, cmd, candidate.prompt_tokens, candidate)
    if trial.passed is not None:
        return trial.passed
    still = f"`{cmd}` still fails with it" if trial.ran and trial.stopped is None else None
    return replace(candidate, checked="; ".join(n for n in (parses, still) if n) or None)


def _look_at_failure(
    parts: Parts, task: Task, cmd: str, prompt_tokens: list[int]
) -> Candidate | None:
    """In place of a `done` that the failing check contradicts: a listing of the folder
    of a file its output says is missing (`_missing_listing`), else a read of the first
    file its output points at (`failures.named_files`) that may be read, unless the
    model has read it since the last change (None then: one look per failure, and a
    `done` after it gives way to a change only). The small model often ends right after
    the failure instead of looking where it points (12 of the 24 multi-step tasks on
    the agent-skill draw); a fix needs the file in view."""
    listing = _missing_listing(task)
    if listing is not None:
        call, missing = listing
        note = f"in place of `done`: `{cmd}` failed, and found no {missing}"
        look = _look(parts, task, call, prompt_tokens, note)
        if look is not None:
            parts.store.append_event(
                "looked_at_failure", {"command": cmd, "glob": call.arguments["pat"]}, task.id
            )
            return look
    for path in task.failing_files:
        call = ToolCall(tool="read", arguments={"path": path})
        if canonical(call) in task.executed:
            return None
        note = f"in place of `done`: `{cmd}` failed, and its output points at {path}"
        look = _look(parts, task, call, prompt_tokens, note)
        if look is not None:
            parts.store.append_event("looked_at_failure", {"command": cmd, "path": path}, task.id)
            return look
    return None


def _tried(
    parts: Parts, task: Task, cmd: str, prompt_tokens: list[int], own: Candidate | None
) -> Trial:
    """What trying changes against the failing check `cmd` on a copy of the workspace
    found (`trials`); the change that turns it green is marked so. Tried: the model's
    `own` change, then, only if it does not pass, changes sampled warmer from the prompt
    (`file_candidates` in all; 1 turns this off), screened like a retry, likeliest
    first; one time box (`check_timeout_s`) for all. A change to a test file is not
    tried: it would not fix what the test checks."""
    settings = parts.settings
    if settings.file_candidates <= 1:
        return Trial(None, 0, "file_candidates is 1")
    if not trials.sandboxed(settings):
        return Trial(None, 0, trials.UNSANDBOXED)  # nothing to sample candidates for
    started = time.perf_counter()
    mine = [own] if own is not None and not _untried(own) else []
    trial = _first_passing(parts, cmd, mine, settings) if mine else Trial(None, 0)
    others: list[Candidate] = []
    left = settings.check_timeout_s - (time.perf_counter() - started)
    if trial.passed is None and trial.stopped is None and left >= 1:
        others = _drawn(parts, task, prompt_tokens, own)
        if others:
            box = settings.model_copy(update={"check_timeout_s": left})
            more = _first_passing(parts, cmd, others, box)
            trial = Trial(more.passed, trial.ran + more.ran, more.stopped)
    winner = trial.passed
    parts.store.append_event(
        "change_checked",
        {
            "command": cmd,
            "candidates": len(mine) + len(others),
            "instead_of_done": own is None,
            "ran": trial.ran,
            "stopped": trial.stopped,
            "winner": winner.call.model_dump() if winner else None,
            "seconds": round(time.perf_counter() - started, 3),
        },
        task.id,
    )
    if winner is None:
        return trial
    return replace(trial, passed=replace(winner, checked=f"`{cmd}` passes with this change"))


def _untried(candidate: Candidate) -> bool:
    """Not tried against the check: no change to try, or a change to a test file."""
    return candidate.preview is None or checks.is_test_file(candidate.preview.path)


def _first_passing(parts: Parts, cmd: str, tried: list[Candidate], settings: Settings) -> Trial:
    return first_passing(
        parts.workspace, cmd, tried, settings, env=parts.tools.env, home=parts.tools.home
    )


def _drawn(
    parts: Parts, task: Task, prompt_tokens: list[int], own: Candidate | None
) -> list[Candidate]:
    """The changes sampled warmer to try after the model's own (`own`), or in place of a
    `done`: where the failing check points (`_where_pointed`), screened like a retry,
    likeliest first, none a test file or `own` again."""
    settings = parts.settings
    drawn = settings.file_candidates - (own is not None)
    tools = [t for t in settings.allowed_tools or TOOL_NAMES if t in FILE_CHANGING_TOOLS]
    params = batch_params(parts, task, greedy_rows=0, salt=29)
    params = params.model_copy(update={"tools": tools, "forbid": _where_pointed(params, task)})
    samples = parts.policy.sample_batch(prompt_tokens, params, drawn)
    kept, _drops = retry.screen(parts, task).all(samples, prompt_tokens)
    others = (c for c in kept if own is None or canonical(c.call) != canonical(own.call))
    return [c for c in sorted(others, key=mean_logprob, reverse=True) if not _untried(c)]


def _where_pointed(params: SampleParams, task: Task) -> DecodeRestrictions | None:
    """The decoding limits for changes tried against the failing check: on the source
    files its output points at (`Task.failing_files`), when it points at any. Only a
    change that turns the check green is shown, so this narrows what is tried, not what
    may be proposed: a change elsewhere (the model edited `package.json` after a failing
    node test, and wrote the data file a program could not find) was all the warm
    samples tried in such tasks, and none could pass."""
    if not task.failing_files or params.forbid is None:
        return params.forbid
    files = list(task.failing_files)
    return params.forbid.model_copy(update={"files": files, "write_paths": files})


def _runs_unasked(parts: Parts, call: ToolCall, preview: Preview | None) -> str | None:
    """Why `call` (which every guard let through unchanged) runs without the reviewer
    under the autonomy setting, or None."""
    settings = parts.settings
    level = settings.autonomy
    if level == "manual":
        return None
    if call.read_only:
        return "read-only"
    if level == "read_only":
        return None
    bash_contained = call.tool != "bash" or (
        parts.tools.sandbox_note(call) is None and not settings.allow_network
    )
    rule = parts.lanes.allow_match(call, preview, str(parts.workspace))
    if rule is not None and bash_contained:
        calls.fired(parts.store, rule.item_id)
        return f"allow rule {rule.item_id}"
    if level == "workspace_edits" and call.tool in FILE_CHANGING_TOOLS and preview:
        return "workspace edit"
    return None
