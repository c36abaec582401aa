"""Calls the model sampled, screened before one is shown and ranked.

Two places choose among candidates instead of showing one sample: the retry after a
correction (ranked by the correction's lift) and the call in place of one that cannot run
(ranked by the model's own log-prob). Both screen the same way (`Screen`): the call
parses, no guard blocks it (rewrites apply), it repeats neither a denied nor an executed
call, and its preview succeeds. What a candidate is checked against comes in as data, so
these functions know nothing of the agent's tasks.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass

from continual_lsp.agent import substitution
from continual_lsp.lanes.guards import GuardVerdict
from continual_lsp.policy.base import Completion, Sampler
from continual_lsp.policy.render import call_text
from continual_lsp.tools.base import Preview, ToolCall, ToolError

# At most this many substituted candidates join a retry (each is one more scored row).
MAX_SUBSTITUTED = 4


@dataclass
class Candidate:
    """A call the model sampled, with the prompt it came from: recorded as a proposal once
    screened (`verdict`: what the guards said of the sampled call, a rewrite already
    applied; `checked`: what its change was checked for). As the retry chosen after a
    correction, `reason` set says why there is none:
    then `call` and `preview` are the denied call's, offered for editing, and there is no
    completion."""

    call: ToolCall
    completion: Completion | None
    prompt_tokens: list[int]
    preview: Preview | None = None
    note: str | None = None
    reason: str | None = None
    verdict: GuardVerdict | None = None
    checked: str | None = None  # what was verified before showing ("parses", ...)


def canonical(call: ToolCall) -> str:
    """One string per call: the key of "the same call" (denied, executed, sampled twice)."""
    return json.dumps({"tool": call.tool, "arguments": call.arguments}, sort_keys=True)


@dataclass(frozen=True)
class Screen:
    """What a candidate must pass before it may be shown."""

    parse: Callable[[str], ToolCall]
    preview: Callable[[ToolCall], tuple[Preview | None, ToolError | None]]
    check_guards: Callable[[ToolCall, Preview | None], GuardVerdict]
    denied: Collection[str]  # canonical keys
    executed: Collection[str]
    # A call that cannot run, made to (`calls.repaired`): the call, its preview and the
    # note that says what was done.
    repair: Callable[
        [ToolCall, Preview | None, ToolError], tuple[ToolCall, Preview, str] | None
    ] = lambda call, shown, error: None

    def vet(
        self, call: ToolCall, completion: Completion | None, prompt_tokens: list[int]
    ) -> tuple[Candidate, ToolError | None]:
        """`call` as the guards and the workspace leave it, and why it still cannot run
        (None: it can): a guard's rewrite applied, a change that cannot run repaired
        (re-indented, narrowed) and the guards asked again. A block (the candidate's
        `verdict`) ends the vetting there. The turn's own sample and every screened
        candidate go through this one sequence."""
        note = None
        preview, error = self.preview(call)
        verdict = self.check_guards(call, preview)
        if verdict.action == "block":
            return Candidate(call, completion, prompt_tokens, preview, verdict=verdict), error
        if verdict.action == "rewrite" and verdict.rewritten_call is not None:
            call, note = verdict.rewritten_call, f"rewritten by a guard: {verdict.message}"
            preview, error = self.preview(call)
        if error is not None and (fixed := self.repair(call, preview, error)) is not None:
            (call, preview, made), error = fixed, None
            verdict = self.check_guards(call, preview)
            note = "; ".join(n for n in (note, made) if n)
        return Candidate(call, completion, prompt_tokens, preview, note, verdict=verdict), error

    def one(self, completion: Completion, prompt_tokens: list[int]) -> tuple[str, Candidate] | str:
        """The candidate as (its canonical key, the candidate), or why it is dropped."""
        try:
            call = self.parse(completion.text)
        except ValueError:
            return "were not a valid call"
        candidate, error = self.vet(call, completion, prompt_tokens)
        assert candidate.verdict is not None
        if candidate.verdict.action == "block":
            return f"were blocked by a guard ({candidate.verdict.message})"
        key = canonical(candidate.call)
        if key in self.denied:
            return "repeated the denied call"
        if key in self.executed:
            return "repeated a call already run"
        if error is not None:
            return f"could not run ({error})"
        return key, candidate

    def all(
        self, completions: list[Completion], prompt_tokens: list[int]
    ) -> tuple[list[Candidate], Counter[str]]:
        """The distinct candidates that may be shown, and why the others were dropped."""
        drops: Counter[str] = Counter()
        kept: dict[str, Candidate] = {}
        for completion in completions:
            screened = self.one(completion, prompt_tokens)
            if isinstance(screened, str):
                drops[screened] += 1
                continue
            key, candidate = screened
            if key in kept or not completion.tokens:
                continue  # the same call sampled twice is one candidate
            kept[key] = candidate
        return list(kept.values()), drops


def mean_logprob(candidate: Candidate) -> float:
    """The sampling policy's mean log-prob of the candidate's tokens."""
    assert candidate.completion is not None
    logprobs = candidate.completion.logprobs
    return sum(logprobs) / len(logprobs)


def ranked_by_lift(
    policy: Sampler, candidates: list[Candidate], student_prompt: list[int]
) -> list[tuple[float | None, float, Candidate]]:
    """(lift, teacher log-prob, candidate) of each: the lift is the mean over the call's
    tokens of log π(call | with correction) − log π(call | the denied turn's prompt). It
    needs each under the denied turn's prompt: one batched request, and none for a lone
    candidate (nothing to rank: ~0.3-0.6 s saved on 2 cores)."""
    tokens = [c.completion.tokens for c in candidates if c.completion]
    many = len(tokens) > 1
    students = policy.logprobs_batch(student_prompt, tokens) if many else [[]] * len(tokens)
    ranked: list[tuple[float | None, float, Candidate]] = []
    for candidate, student in zip(candidates, students, strict=True):
        teacher = mean_logprob(candidate)
        lift = teacher - sum(student) / len(student) if student else None
        ranked.append((lift, teacher, candidate))
    return ranked


@dataclass(frozen=True)
class Swaps:
    """The correction's swaps as scored candidates; `in_place` holds the canonical keys
    of those that rewrite what a call replaces: exactly what the correction says, where
    the model pointed."""

    completions: list[Completion]
    in_place: frozenset[str]


def substituted(
    policy: Sampler,
    completions: list[Completion],
    denied: ToolCall,
    correction: str,
    prompt_tokens: list[int],
    replaced: Callable[[ToolCall], str | None],
) -> Swaps:
    """The correction's literal substitutions (substitution.py) applied to the denied
    call and to every sampled one, to what each replaces (`replaced(call)`: the text an
    edit_lines call's range holds now) and to what each writes, and the calls the
    correction names outright (`substitution.named_calls`), each scored by the model in
    the correction's context (one batched request) so that the lift ranks it like a
    sample. In-place variants come first under MAX_SUBSTITUTED, then named calls."""
    pairs = substitution.substitutions(correction)
    named = substitution.named_calls(correction, denied)
    if not pairs and not named:
        return Swaps([], frozenset())
    renderer = policy.renderer
    calls = [denied]
    for completion in completions:
        try:
            calls.append(renderer.parse_call(completion.text))
        except ValueError:
            continue
    anchored = [substitution.at_a_line(call) for call in calls]
    in_place = [substitution.apply_in_place(call, pairs, replaced(call)) for call in anchored]
    written = [substitution.apply(call, pairs) for call in calls]
    variants: dict[str, ToolCall] = {}
    for variant in [*in_place, *named, *written]:
        if variant is not None:
            variants.setdefault(canonical(variant), variant)
    chosen = dict(list(variants.items())[:MAX_SUBSTITUTED])
    tokens = [renderer.render_call(call) for call in chosen.values()]
    scores = policy.logprobs_batch(prompt_tokens, tokens) if tokens else []
    exact = {canonical(v) for v in in_place if v is not None}
    return Swaps(
        [
            Completion(tokens=t, logprobs=lp, text=call_text(call))
            for call, t, lp in zip(chosen.values(), tokens, scores, strict=True)
        ],
        frozenset(key for key in chosen if key in exact),
    )
