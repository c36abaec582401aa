"""One call's way through the agent, shared by the rooms: previewed, recorded as a
proposal (and loaded back from the store), run with a checkpoint, and the task it ends."""

from __future__ import annotations

import collections
import hashlib
import time
from collections.abc import Collection, Sequence

from continual_lsp.agent import narrowing, reindent, trials
from continual_lsp.agent.candidates import Candidate, canonical
from continual_lsp.agent.errors import Unparsable
from continual_lsp.agent.lanes_facade import LanesFacade
from continual_lsp.agent.parts import Parts, Task
from continual_lsp.agent.proposal import Proposal
from continual_lsp.protocol import AllowOffer, TaskDoneNotification
from continual_lsp.store import Store
from continual_lsp.tools import checks, failures
from continual_lsp.tools.base import (
    FILE_CHANGING_TOOLS,
    OldTextNotFound,
    Preview,
    RangePastEnd,
    ToolCall,
    ToolError,
    ToolResult,
)
from continual_lsp.tools.bash import TIMEOUT_EXIT_CODE
from continual_lsp.tools.runner import ToolRunner


def preview(
    tools: ToolRunner,
    call: ToolCall,
    replaced: Collection[tuple[str, str]] = (),
    seen: Collection[str] | None = None,
) -> tuple[Preview | None, ToolError | None]:
    """The call's preview (computed once per proposal), or why it cannot run.

    With `seen` (the paths the task has read or changed, `seen_paths`; None for a call
    the reviewer wrote): a `write` that drops most of a file the task never looked at
    cannot run (`clobbers`). On the agent-skill draw a rename became a two-line stub
    written over the whole module. Claude Code's Write refuses any write to a file not
    read first; a write that keeps most of the file's lines shows the model knew them
    (from the task, or an earlier session), so only the loss is refused here. The screen
    then shows a candidate that can run, or the model is told why and reads the file.

    A change that leaves the file as it is counts as one that cannot run: approving it
    would do nothing, and a small model's favourite retry is the old line copied back.
    So does one that puts back what a change run in this task replaced (`replaced`:
    `Task.replaced`): after a fix the small model often rewrites the line as it was
    (on the agent-skill draw, 3 of the 11 one-step tasks left unfinished). And one that
    leaves a file that parsed not parsing (`tools.checks`): it comes with its preview,
    as `Unparsable`.
    """
    try:
        shown = tools.preview(call)
    except ToolError as exc:
        return None, exc
    if (
        shown is not None
        and seen is not None
        and call.tool == "write"
        and shown.path not in seen
        and clobbers(shown)
    ):
        return None, ToolError(
            f"write would drop most of {shown.path}, which this task has not read: read it "
            "first, or change it with edit"
        )
    if shown is not None and shown.old_content == shown.new_content:
        return None, ToolError(f"{call.tool} would leave {shown.path} as it is")
    if shown is not None and replaced and (shown.path, content_key(shown.new_content)) in replaced:
        return None, ToolError(
            f"{call.tool} would undo a change to {shown.path} made in this task; to change "
            "it again, change it to something new"
        )
    if shown is not None:
        problem = checks.breaks(shown.path, shown.old_content, shown.new_content)
        if problem is not None:
            # The preview stays: the guards judge it, and it is shown, marked, when no
            # other candidate parses (`turns._instead_of_failed`).
            message = f"{call.tool} would leave {shown.path} not parsing ({problem})"
            return shown, Unparsable(message, problem)
    return shown, None


def clobbers(shown: Preview) -> bool:
    """The change keeps fewer than half of the old file's non-blank lines (of three or
    more): a rewrite of what was there would keep most of them."""
    if shown.old_content is None:
        return False
    old = [line.strip() for line in shown.old_content.splitlines() if line.strip()]
    if len(old) < 3:
        return False
    left = collections.Counter(line.strip() for line in shown.new_content.splitlines())
    kept = 0
    for line in old:
        if left[line] > 0:
            left[line] -= 1
            kept += 1
    return 2 * kept < len(old)


def seen_paths(tools: ToolRunner, task: Task) -> set[str]:
    """The workspace paths `task` has read or changed so far."""
    return {path for call in task.history if (path := tools.target_path(call)) is not None}


def repaired(
    tools: ToolRunner,
    call: ToolCall,
    shown: Preview | None,
    error: ToolError,
    replaced: Collection[tuple[str, str]] = (),
) -> tuple[ToolCall, Preview, str] | None:
    """A change that cannot run, made to, keeping what the model wrote where it can: one
    whose only fault is its indentation re-indented (`reindent`), an edit whose `old`
    is not in the file narrowed to the part that differs (`narrowing`), an edit_lines
    range past the end of the file brought within it (`_within`). The first variant
    that runs, its preview and the note that says what was done; None for any other
    failure."""
    if (
        isinstance(error, Unparsable)
        and shown is not None
        and shown.old_content is not None
        and reindent.is_indentation(error.problem)
    ):
        tries, note = reindent.variants(call, shown.old_content), reindent.NOTE
    elif isinstance(error, OldTextNotFound):
        tries, note = narrowing.variants(call), narrowing.NOTE
    elif isinstance(error, RangePastEnd) and call.tool == "edit_lines":
        within = _within(call, error.lines)
        tries, note = ([] if within is None else [within]), CLAMPED
    else:
        return None
    for variant in tries:
        fixed, problem = preview(tools, variant, replaced)
        if problem is None and fixed is not None:
            return variant, fixed, note
    return None


CLAMPED = "the line range brought within the file (as written it ran past the end)"


def _within(call: ToolCall, lines: int) -> ToolCall | None:
    """`call`'s edit_lines range ended at the file's last line (`lines`): a start past
    the end appends. The small model counts a file's lines one or two too many (after
    "put the test in tests/x_test.py", its edits of the file it had just written); a
    range further out is a line number made up, and stays a call that cannot run."""
    if int(call.arguments["end"]) > lines + 2:
        return None
    start = min(int(call.arguments["start"]), lines + 1)
    return ToolCall(
        tool="edit_lines",
        arguments={**call.arguments, "start": start, "end": max(start - 1, lines)},
    )


def load_proposal(parts: Parts, proposal_id: str) -> Proposal | None:
    """A proposal as the store holds it; a pending one with its allow offer and whether a
    guard blocks it now."""
    row = parts.store.proposal(proposal_id)
    if row is None:
        return None
    proposal = Proposal(
        id=row["id"],
        task_id=row["task_id"],
        call=ToolCall(tool=row["tool"], arguments=row["arguments"]),
        read_only=row["tool"] in ("read", "glob", "grep"),
        preview=Preview.model_validate(row["preview"]) if row["preview"] else None,
        adapter_version=row["adapter_version"],
        checked=parts.checked.get(row["id"]),
    )
    if row["status"] == "pending":
        proposal.allow_offer = allow_offer(parts, proposal.call, proposal.preview)
        task = parts.tasks.get(row["task_id"])
        _mark_blocked(parts.lanes, proposal, task.history if task else [])
    return proposal


def _mark_blocked(lanes: LanesFacade, proposal: Proposal, history: Sequence[ToolCall]) -> None:
    """Set `blocked_by` when a guard blocks the proposal now (one compiled after it was
    proposed too): it is offered with Edit and override, never a plain Approve."""
    verdict = lanes.check_guards(proposal.call, proposal.preview, history)
    proposal.blocked_by = verdict.message if verdict.action == "block" else None


def allow_offer(parts: Parts, call: ToolCall, preview: Preview | None) -> AllowOffer | None:
    settings = parts.settings
    if settings.autonomy in ("manual", "read_only"):
        return None
    found = parts.lanes.allow_offer(call, preview, str(parts.workspace), settings.allow_offer_after)
    if found is None:
        return None
    spec, approvals = found
    return AllowOffer(rule=spec.summary(), approvals=len(approvals))


def add_proposal(parts: Parts, task: Task, candidate: Candidate) -> Proposal:
    """Record a proposal as the task's pending one (not yet shown)."""
    call = candidate.call
    sandbox_note = parts.tools.sandbox_note(call)
    proposal_id = store_proposal(parts, task, candidate)
    task.pending = proposal_id
    checked = candidate.checked or _parse_check(candidate.preview)
    if checked is not None:
        parts.checked[proposal_id] = checked
        parts.store.append_event("checked", {"checked": checked}, task.id, proposal_id)
    return Proposal(
        id=proposal_id,
        task_id=task.id,
        call=call,
        read_only=call.read_only,
        preview=candidate.preview,
        note="; ".join(n for n in (candidate.note, sandbox_note) if n) or None,
        adapter_version=parts.training.current_version_name(),
        checked=checked,
    )


def _parse_check(preview: Preview | None) -> str | None:
    """`checked` for a change nothing else checked (a retry, the denied call offered
    again): whether it parses, when a checker exists for its file."""
    if preview is None or checks.checker(preview.path) is None:
        return None
    problem = checks.breaks(preview.path, preview.old_content, preview.new_content)
    return "parses" if problem is None else f"does not parse: {problem}"


def store_proposal(parts: Parts, task: Task, candidate: Candidate, status: str = "pending") -> str:
    call, completion, shown = candidate.call, candidate.completion, candidate.preview
    assert completion is not None  # a retry without one is given one before it is shown
    return parts.store.add_proposal(
        task.id,
        task.turn,
        call.tool,
        call.arguments,
        candidate.prompt_tokens,
        completion.tokens,
        completion.logprobs,
        shown.model_dump() if shown else None,
        parts.training.current_version_name(),
        status=status,
    )


def execute(parts: Parts, task: Task, proposal: Proposal, call: ToolCall) -> ToolResult:
    """Run an accepted call (its decision committed) and move the task past it."""
    # The preview pins what the reviewer saw, including "this file does not exist yet".
    pinned = proposal.preview if call == proposal.call else None
    result = _checkpointed(parts, proposal.id, call, pinned)
    if call.tool in FILE_CHANGING_TOOLS:
        # The workspace changed: running the tests again or re-reading the file is
        # the check of the change, not a repeat (issue 30; the curriculum does the same).
        task.executed = set()
        if pinned is not None and pinned.old_content is not None:
            before = content_key(pinned.old_content)
            # A change of whitespace only has nothing to undo that a later one could
            # put back: every later re-indent would count.
            if before != content_key(pinned.new_content):
                task.replaced.add((pinned.path, before))
    if call.tool == "bash":
        result = _tracked_check(parts, task, str(call.arguments["cmd"]), result)
    task.executed.add(canonical(call))
    task.history.append(call)
    task.conversation.add_call(call, result)
    task.pending = None
    task.denied = []
    task.retries = 0
    task.turn += 1
    if call.tool == "done":
        # Approved (or edited): the task ends with the summary the reviewer accepted.
        finish(parts, task, str(call.arguments["summary"]))
    return result


def _tracked_check(parts: Parts, task: Task, cmd: str, result: ToolResult) -> ToolResult:
    """The task's failing check (`Task.failing_check`) after a bash run of `cmd`, and the
    result as the model is to see it.

    A run of the task's check sets it: failed, or passed. A test run that ran no test
    (`checks.ran_no_tests`: pytest in a JavaScript project; `node:test`, which names
    tests but is no command) says nothing of the code, and a change tried against it
    could never pass (4 of the 12 failed multi-step tasks on the agent-skill draw): when
    the workspace runs its tests otherwise (`checks.workspace_suite`), the result says
    how, and that command, run on a copy (`_check_suite`), becomes the failing check if
    it fails there. Its failure is shown with the note: told only where the command is
    written, the model edited that file (`package.json`) in 4 of the 10 multi-step tasks
    it left unfinished on two development draws.
    """
    tests = checks.is_check(cmd, task.text)
    if (tests or "test" in cmd.lower()) and checks.ran_no_tests(result.output, result.exit_code):
        suite = checks.workspace_suite(parts.workspace)
        if suite is not None and suite.cmd != " ".join(cmd.split()):
            failed = _check_suite(parts, task, cmd, suite)
            note = f"no tests ran; this workspace's tests run with `{suite.cmd}` ({suite.source})"
            shown = (
                f"[{note}]"
                if failed is None
                else f"[{note}; on a copy of the workspace it fails:]\n{failed}"
            )
            return result.model_copy(update={"output": f"{result.output}\n{shown}"})
    if tests:
        _check_ran(parts, task, cmd, result.ok, result.output)
    return result


def _check_ran(parts: Parts, task: Task, cmd: str, ok: bool, output: str) -> None:
    """The task's failing check as the run of `cmd` leaves it: none if it passed, else
    `cmd` and what its output points at or says is missing."""
    failed = not ok
    task.failing_check = cmd if failed else None
    task.failing_files = failures.named_files(output, parts.workspace) if failed else []
    task.missing_files = failures.missing_files(output, parts.workspace) if failed else []


def _check_suite(parts: Parts, task: Task, cmd: str, suite: checks.Suite) -> str | None:
    """Run the workspace's own tests on a copy (`trials.run_on_copy`: the reviewer did
    not approve this command): failing, they become the task's failing check, and their
    output is returned; passing, they stop being it. A run with no verdict (none possible
    here, out of time, no test ran) leaves the check as it was: only a known failure is
    tried against."""
    started = time.perf_counter()
    env, home = parts.tools.env, parts.tools.home
    run = trials.run_on_copy(parts.workspace, suite.cmd, parts.settings, env=env, home=home)
    verdict = None  # not known: it did not run, ran out of time, or ran no test either
    if (
        run is not None
        and run.exit_code != TIMEOUT_EXIT_CODE
        and not checks.ran_no_tests(run.output, run.exit_code)
    ):
        verdict = "passes" if run.ok else "fails"
        if not run.ok or task.failing_check == suite.cmd:
            _check_ran(parts, task, suite.cmd, run.ok, run.output)
    parts.store.append_event(
        "workspace_suite",
        {
            "command": cmd,
            "suite": suite.cmd,
            "source": suite.source,
            "verdict": verdict,
            "seconds": round(time.perf_counter() - started, 3),
        },
        task.id,
    )
    return run.output if run is not None and verdict == "fails" else None


def _checkpointed(
    parts: Parts, proposal_id: str, call: ToolCall, pinned: Preview | None
) -> ToolResult:
    """Run a call; a change is checkpointed (committed before it runs) for undo."""
    tools, checkpoints = parts.tools, parts.checkpoints
    target = tools.target_path(call) if call.tool in FILE_CHANGING_TOOLS else None
    snapshot = None
    if target is not None:
        checkpoints.before_file(proposal_id, target)
    elif call.tool == "bash":
        snapshot = checkpoints.before_bash(proposal_id)
    try:
        result = tools.execute(call, preview=pinned)
    except ToolError as exc:
        result = ToolResult(ok=False, output=f"error: {exc}")
    if target is not None:
        checkpoints.after_file(proposal_id, target, result.ok)
    elif snapshot is not None:
        checkpoints.after_bash(proposal_id, snapshot)
    return result


def finish(parts: Parts, task: Task, summary: str) -> None:
    task.done = summary
    task.pending = None
    parts.store.set_task_status(task.id, "done", summary)
    parts.listener.on_task_done(TaskDoneNotification(task_id=task.id, summary=summary))


def fired(store: Store, item_id: str | None) -> None:
    """A guard or allow rule acted on a proposal (the ledger's `fired`)."""
    if item_id is not None:
        store.bump(f"fired:{item_id}")


def denied_calls(store: Store, task: Task) -> dict[str, ToolCall]:
    """The calls denied in the current turn, by proposal id."""
    calls = {}
    for pid in task.denied:
        row = store.proposal(pid)
        if row is not None:
            calls[pid] = ToolCall(tool=row["tool"], arguments=row["arguments"])
    return calls


def content_key(text: str) -> str:
    """A file's content as `Task.replaced` keeps it: whitespace aside, since the model
    puts an old line back as often with other indentation as with the same (2 of the 3
    reverts on the agent-skill draw)."""
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()
