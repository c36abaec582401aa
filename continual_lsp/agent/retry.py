"""Candidates chosen instead of sampled: the retry after a correction (`choose_retry`,
shown by `show_retry`), and a runnable call in place of one that cannot run
(`runnable_instead`). Both sample a batch, screen it (`screen`) and rank what is left
(`candidates`)."""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

from continual_lsp.agent import calls
from continual_lsp.agent.candidates import (
    Candidate,
    Screen,
    canonical,
    mean_logprob,
    ranked_by_lift,
    substituted,
)
from continual_lsp.agent.grounding import in_workspace
from continual_lsp.agent.parts import Parts, Task
from continual_lsp.agent.proposal import Proposal
from continual_lsp.agent.sampling import batch_params, fit_prompt
from continual_lsp.agent.substitution import named_paths, named_tools
from continual_lsp.policy.base import Completion, DecodeRestrictions, SampleParams
from continual_lsp.text import split_lines
from continual_lsp.tools.base import TOOL_NAMES, ToolCall, ToolError
from continual_lsp.tools.runner import ToolRunner


def choose_retry(parts: Parts, task: Task, denied: Proposal, correction: str) -> Candidate:
    """The retry after a correction: chosen among candidates, not just sampled.

    `retry_candidates` calls are sampled in one batch from the conversation with the
    correction (the teacher's context): the greedy call and warmer samples, and a
    greedy call of each tool and path the correction names that none of them used
    (`_probes`). A candidate is dropped when it repeats a denied or executed call,
    a guard blocks it (rewrites apply, as for any proposal), or its preview fails. A
    correction that spells out a literal swap ("use / instead of //") adds the sampled
    and denied calls with the swap applied, to what they replace and to what they
    write, and the calls it names outright (`candidates.substituted`). The rest are
    ranked by the correction's lift (`candidates.ranked_by_lift`), ties by the
    teacher's log-prob, except that a swap applied in place comes first, then a call of
    a tool, or on a path, the correction names. With nothing left, the choice carries
    the one-line reason instead.
    """
    started, cpu_started = time.perf_counter(), time.thread_time()
    policy = parts.policy
    parts.training.sync_sampler(policy)
    prompt_tokens = fit_prompt(parts, task)
    params = batch_params(parts, task, greedy_rows=1, salt=0)
    if denied.call.tool == "done":
        # "Not done" asks for more work: the retry acts, it does not finish again.
        tools = [t for t in params.tools or TOOL_NAMES if t != "done"]
        params = params.model_copy(update={"tools": tools or params.tools})
    completions = policy.sample_batch(prompt_tokens, params, parts.settings.retry_candidates)
    row = parts.store.proposal(denied.id)
    student_prompt = row["prompt_tokens"] if row else prompt_tokens
    named = [t for t in named_tools(correction) if t in (params.tools or TOOL_NAMES)]
    paths = in_workspace(parts.tools, named_paths(correction))
    probes = _probes(parts, prompt_tokens, params, completions, named, paths)
    completions += probes
    replaced = partial(_range_text, parts.tools)
    swaps = substituted(policy, completions, denied.call, correction, prompt_tokens, replaced)
    completions += swaps.completions
    # The correction may ask for a change to be put back: no `replaced` check here.
    kept, drops = screen(parts, task, undo_allowed=True).all(completions, prompt_tokens)
    ranked = ranked_by_lift(policy, kept, student_prompt)
    summary = {
        "candidates": len(completions),
        "substituted": len(swaps.completions),
        "probes": len(probes),
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
        parts.store.append_event("retry_chosen", {**summary, "winner": None}, task.id)
        return Candidate(denied.call, None, prompt_tokens, denied.preview, None, reason)
    # The correction's own swap on the line the model chose is what the reviewer
    # asked for, word for word: it wins over the model's rewrites of that line, which
    # the lift can rank higher (`return 1 / values` over the fix, on the README demo).
    # Then a call with the tool or on the path the correction names ("use write", "it
    # goes in src/pkg/units.py"): the 135M model's lift favoured its own edit_lines over
    # the write it was told to send (tool_choice).
    lift, teacher, choice = max(
        ranked,
        key=lambda entry: (
            canonical(entry[2].call) in swaps.in_place,
            entry[2].call.tool in named or _on_named(parts.tools, entry[2].call, paths),
            entry[0] or 0.0,
            entry[1],
        ),
    )
    parts.store.append_event(
        "retry_chosen",
        {**summary, "winner": choice.call.model_dump(), "lift": lift, "teacher": teacher},
        task.id,
    )
    return choice


def _probes(
    parts: Parts,
    prompt_tokens: list[int],
    params: SampleParams,
    completions: list[Completion],
    named: list[str],
    paths: list[str],
) -> list[Completion]:
    """A greedy call for each tool the correction names (`substitution.named_tools`)
    and then each path it names (`substitution.named_paths`) that no sampled candidate
    uses, at most `retry_probes` in all. A named path is written when it names no file
    yet ("new modules go in src/pkg/units.py"), else edited. The 135M model's tool and
    path are near-certain: after "use write, not edit_lines" all six samples were
    edit_lines again (tool_choice: 0 of 14 retries followed); told where the new module
    goes, it edited the file it had open (module_location: 0 of 15). Probing the tools
    the correction merely raises (its lift on the call's opening) was tried and dropped:
    the lift there is noise of several nats, and a probed glob, grep or `done` then won
    the ranking (docs/evidence.md, session 25)."""
    policy, tools = parts.policy, parts.tools
    sampled: list[ToolCall] = []
    for completion in completions:
        try:
            sampled.append(policy.renderer.parse_call(completion.text))
        except ValueError:
            continue
    greedy = params.model_copy(update={"greedy_rows": 1})
    wanted = [
        greedy.model_copy(update={"tools": [tool]})
        for tool in named
        if all(call.tool != tool for call in sampled)
    ]
    wanted += [
        narrowed
        for path in paths
        if not any(_on_named(tools, call, [path]) for call in sampled)
        and (narrowed := _on_path(greedy, tools, path)) is not None
    ]
    return [
        probe
        for probe_params in wanted[: parts.settings.retry_probes]
        for probe in policy.sample_batch(prompt_tokens, probe_params, 1)
    ]


def _on_named(tools: ToolRunner, call: ToolCall, paths: list[str]) -> bool:
    """Whether `call` works on one of the named `paths`, or writes a file under a named
    folder (a folder is where new files go: an edit of a file in it is not what was
    asked)."""
    target = tools.target_path(call)
    return target is not None and any(
        target.startswith(path) and call.tool == "write" if path.endswith("/") else target == path
        for path in paths
    )


def _on_path(params: SampleParams, tools: ToolRunner, path: str) -> SampleParams | None:
    """`params` narrowed to a change of `path` (workspace-relative): a write when no
    file is there (any new file in a named folder), an edit when one is; None when the
    allowed tools have none for it."""
    exists = not path.endswith("/") and tools.resolve(path).is_file()
    allowed = params.tools or TOOL_NAMES
    limits = params.forbid or DecodeRestrictions()
    if exists:
        change = [t for t in ("edit", "edit_lines") if t in allowed]
        forbid = limits.model_copy(update={"files": [path]})
    else:
        change = ["write"] if "write" in allowed else []
        forbid = limits.model_copy(update={"write_paths": [path]})
    return params.model_copy(update={"tools": change, "forbid": forbid}) if change else None


def runnable_instead(
    parts: Parts, task: Task, failed: Candidate, error: ToolError
) -> Candidate | None:
    """The likeliest runnable call among `retry_candidates` samples from the prompt that
    gave `failed`, a call that cannot run (a range past the end, `old` text not in the
    file). Told of the failure instead, a small model mostly gives up the change (it
    runs the tests and ends), so the reviewer never sees the change it meant; among
    its own samples one usually can run. Screened like a retry (guards, preview, not
    a denied or executed call), ranked by the model's mean log-prob. The failed call
    is kept in the store as `invalid`, not in the conversation. None when no sample
    can run either."""
    params = batch_params(parts, task, greedy_rows=0, salt=13)
    prompt_tokens = failed.prompt_tokens
    samples = parts.policy.sample_batch(prompt_tokens, params, parts.settings.retry_candidates)
    kept, drops = screen(parts, task).all(samples, prompt_tokens)
    best = max(kept, key=mean_logprob, default=None)
    parts.store.append_event(
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
        calls.store_proposal(parts, task, failed, status="invalid")
    return best


def screen(parts: Parts, task: Task, undo_allowed: bool = False) -> Screen:
    """What a candidate for `task`'s next proposal must pass (`candidates.Screen`);
    `undo_allowed`: a change may put back what one of the task's changes replaced."""
    replaced = () if undo_allowed else task.replaced
    return Screen(
        parse=parts.policy.renderer.parse_call,
        preview=partial(
            calls.preview, parts.tools, replaced=replaced, seen=calls.seen_paths(parts.tools, task)
        ),
        repair=partial(calls.repaired, parts.tools, replaced=replaced),
        check_guards=lambda call, shown: parts.lanes.check_guards(call, shown, task.history),
        denied={canonical(c) for c in calls.denied_calls(parts.store, task).values()},
        executed=task.executed,
    )


def show_retry(parts: Parts, task: Task, choice: Candidate) -> Proposal:
    """Show the chosen retry; when there is none, the denied call again with the reason
    and the Edit offer, so a correction never ends a task silently. The chosen retry
    is shown even when read-only: it answers the correction."""
    blocked = None
    if choice.completion is None:
        policy = parts.policy
        tokens = policy.renderer.render_call(choice.call)
        logprobs = policy.logprobs(choice.prompt_tokens, tokens)
        verdict = parts.lanes.check_guards(choice.call, choice.preview, task.history)
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
    proposal = calls.add_proposal(parts, task, choice)
    proposal.blocked_by = blocked
    parts.listener.on_proposal(proposal)
    return proposal


def _range_text(tools: ToolRunner, call: ToolCall) -> str | None:
    """The text an edit_lines call's range holds now (None for another tool, or a
    file or range that is not there)."""
    if call.tool != "edit_lines":
        return None
    try:
        shown = tools.preview(call)  # the file as the tool reads it
    except ToolError:
        return None
    if shown is None or shown.old_content is None:
        return None
    lines = split_lines(shown.old_content)
    start, end = call.arguments["start"], call.arguments["end"]
    if not 1 <= start <= end <= len(lines):
        return None
    return "".join(lines[start - 1 : end]).removesuffix("\n").removesuffix("\r")
