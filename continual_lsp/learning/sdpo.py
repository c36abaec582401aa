"""SDPO: what a reviewer's denial or edit does to the weights (DESIGN §4).

One job = one reviewer signal about one proposal. `sdpo_step` turns it into one LoRA
step (more with the options at the end of this docstring):

1. **Teacher context** (`teacher_prompt`): the student's own prompt with one extra user
   turn spliced in before the assistant header: the reviewer's correction and, when one
   exists, a demonstration ("A correct call here is: {…}"); a denial without one shows
   the calls the reviewer approved after earlier corrections of the same cluster
   (`SdpoJob.examples`, context only: they answer other prompts). The denied call is *never*
   put in the teacher's context: the embedded 135M model copies its context, so a
   teacher that sees the denied call assigns it high probability and SDPO would
   reinforce it (FIELD-NOTES: teacher −4.5 vs student −63.9 on a denied call). What a
   small teacher can do is copy a demonstration.
2. **Scores.** Teacher logprobs of the proposal's tokens `y` (and of the demonstration's
   tokens), and the current student's logprobs of the same tokens in the plain prompt.
3. **Per-token advantages** `adv[t] = log π_T(y_t | teacher ctx) − log π(y_t | ctx)`:
   negative where the teacher (who saw the fix) would not have written that token, so the
   surrogate pushes it down; positive where it agrees.
4. **Datums** (see `build_datums`):
   - the sampled call `y` with `old_logprobs` = the sampling logprobs stored with the
     proposal (the behaviour policy; the step's importance ratio π/π_old corrects for
     any adapter change since sampling, clamped to [is_clip_low, is_clip_high]);
   - the demonstration `d` with advantages `log π_T(d) − log π(d)` (the teacher, having
     the demonstration in view, rates it near certain, so this raises the student's
     logprob of `d` token by token where it is low) and `old_logprobs` = the current
     student (the demonstration was not sampled: on-policy weight 1).
   Both sides are scored under the decoding grammar's mask (`grammar_masks`): forced
   tokens get advantage 0 and decisions are compared among valid alternatives, as the
   sampler sees them; the raw gap is mostly about JSON framing, not the reviewer's point.
5. **Loss**: `loss_mode="token"` → the clamped-IS surrogate (`importance_sampling`),
   `loss_mode="topk"` → top-k + tail distillation to the teacher's distribution at each
   position the grammar left open (`topk_distill`, local backend only; forced positions
   get loss weight 0); both + `kl_coef · KL(π‖π_ref)` at every position.

Signals: `deny` — the sampled call and the demonstration: the retry the agent chose
among candidates sampled with the correction in view, that no guard blocks and whose
preview runs (SDPO's successful attempt in the teacher's context; DESIGN §4), or none
when every candidate was dropped;
`edit` — the edited call is the demonstration, the proposal's tokens are the student's
sample (same two datums); `approved_retry` — after a denial, the retry the reviewer
approved is the demonstration for the denied turn's prompt (demonstration datum only: the
denial already had its own step).

Teachers (`settings.teacher`): `current` — the student's own weights (shares the prompt's
KV prefix with the student); `ema` — a second peft adapter `ema` holding an exponential
moving average of the trained adapter (`θ_T ← (1−ρ)θ_T + ρθ`, ρ = teacher_update_rate,
after every step; saved beside each adapter version and restored with it, so a restarted
worker or a revert keeps the teacher of those weights; a version saved without one starts
it from the student's weights, not from zero as TRL's `PEFTAdapterEMACallback` does);
`trust_region` — the current teacher mixed with the frozen reference in probability
space, `q = (1−ρ)·π_T + ρ·π_ref` (both on the teacher context), ρ = `trust_region_rate`
(default `teacher_update_rate`).

More from one correction (issue 33; both off by default, `Settings`): `steps_per_correction`
repeats the step on the same datums until the IS clamp engages on most tokens (the
trust region: the stored scores stop describing the weights), and `replay_same_cluster`
adds earlier corrections of the same cluster (`SdpoJob.cluster`, the lane item a denial
was routed to) to each new step's batch, re-scored under the current weights.

Over 500 lines on purpose: teacher context, scoring, grammar masks, datums and the step
are one algorithm, read top to bottom against this docstring (and `SdpoConfig` sits
beside it, as TRL keeps its config beside its trainer).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
from pydantic import BaseModel, ConfigDict, Field

from continual_lsp.config import Settings
from continual_lsp.policy import training
from continual_lsp.policy.base import Datum, LossName, Policy, TrainMetrics, TrainOptions
from continual_lsp.tools.base import ToolCall

if TYPE_CHECKING:
    from continual_lsp.policy.local import LocalPolicy

log = logging.getLogger(__name__)

JOB_KIND = "sdpo"
EMA_ADAPTER = "ema"

Signal = Literal["deny", "edit", "approved_retry"]


class SdpoJob(BaseModel):
    """The training job the agent enqueues: `store.enqueue_job("sdpo", job.model_dump())`.

    `prompt_tokens`, `tokens`, `logprobs` are the proposal's as stored (the prompt the
    student saw, the call it sampled, the sampling logprobs). `demonstration` is a
    `ToolCall.model_dump()` (`{"tool": …, "arguments": {…}}`): the edited call, or the
    approved retry. For `approved_retry`, `tokens`/`logprobs` may be empty. `examples`:
    calls the reviewer accepted after earlier corrections of the same cluster, in other
    situations; the teacher sees them, but they are never trained on as demonstrations
    (they answer other prompts).
    """

    proposal_id: str
    prompt_tokens: list[int] = Field(min_length=1)
    tokens: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    correction: str | None = None
    demonstration: dict[str, Any] | None = None
    examples: list[dict[str, Any]] = Field(default_factory=list)
    signal: Signal = "deny"
    # The lane item the correction was routed to (its cluster): what `replay_same_cluster`
    # replays from. None: not routed (an edit, a guard's own block).
    cluster: str | None = None

    def demonstration_call(self) -> ToolCall | None:
        return None if self.demonstration is None else ToolCall.model_validate(self.demonstration)


class SdpoConfig(BaseModel):
    """One SDPO step's settings: `Settings` unless the caller overrides them, as TRL keeps
    an `SDPOConfig` beside its trainer. An option it does not know is an error, never
    dropped on the way to the backend.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    lr: float
    kl_coef: float
    clip_low: float
    clip_high: float
    trust_region_rate: float  # the `trust_region` teacher's mixing rate
    grammar_mask: bool = True  # advantages under the grammar's mask (`grammar_masks`)
    # Passed to `train_step` only when given; otherwise the backend's own default.
    max_grad_norm: float | None = 1.0
    alpha: float = 1.0
    prefix_cache: bool = True
    # "More from each correction" (issue 33), both off by default. Steps on the same
    # datums, scored once: later steps see the ratio π/π_old move away from 1, and they
    # stop once the clamp [clip_low, clip_high] has engaged on most tokens (the trust
    # region) — the KL to the reference pulls back at every one.
    steps_per_correction: int = Field(default=1, ge=1, le=8)
    # Up to this many earlier corrections of the same cluster, re-scored under the current
    # weights, ride in each new step's batch (their behaviour logprobs stay the stored ones).
    replay_same_cluster: int = Field(default=0, ge=0, le=8)

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> SdpoConfig:
        return cls.model_validate(
            {
                "lr": settings.learning_rate,
                "kl_coef": settings.kl_coef,
                "clip_low": settings.is_clip_low,
                "clip_high": settings.is_clip_high,
                "trust_region_rate": settings.teacher_update_rate,
                "steps_per_correction": settings.steps_per_correction,
                "replay_same_cluster": settings.replay_same_cluster,
                **overrides,
            }
        )

    def train_options(self) -> TrainOptions:
        options = TrainOptions(
            kl_coef=self.kl_coef, clip_low=self.clip_low, clip_high=self.clip_high
        )
        if "max_grad_norm" in self.model_fields_set:
            options["max_grad_norm"] = self.max_grad_norm
        if "alpha" in self.model_fields_set:
            options["alpha"] = self.alpha
        if "prefix_cache" in self.model_fields_set:
            options["prefix_cache"] = self.prefix_cache
        return options


class NothingToLearn(ValueError):
    """The job carries no signal a step could use (no correction and no demonstration)."""


# -- teacher context --------------------------------------------------------------------------


def feedback_text(
    correction: str | None, demonstration_text: str | None, example_texts: Sequence[str] = ()
) -> str:
    """The user turn the teacher sees. Never contains the denied call."""
    parts = []
    if correction and correction.strip():
        parts.append(f"The reviewer says: {correction.strip()}")
    if demonstration_text:
        parts.append(f"A correct call here is:\n{demonstration_text}")
    if example_texts:
        parts.append(
            "Calls the reviewer approved after the same correction elsewhere:\n"
            + "\n".join(example_texts)
        )
    return "\n".join(parts)


@dataclass(frozen=True)
class _TurnFormat:
    turn_prefix: str  # text before a user turn's content (ChatML: "<|im_start|>user\n")
    turn_suffix: str  # text after it ("<|im_end|>\n")
    header: str  # the assistant generation header ("<|im_start|>assistant\n")


def _turn_format(tokenizer: Any) -> _TurnFormat | None:
    """Derive the user-turn framing and assistant header from the chat template itself."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    marker = "\x00FEEDBACK\x00"
    base = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]

    def render(messages: list[dict[str, str]], generation: bool) -> str:
        return str(
            tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation
            )
        )

    try:
        plain = render(base, False)
        with_turn = render([*base, {"role": "user", "content": marker}], False)
        with_header = render(base, True)
    except Exception:  # a template that rejects two user turns in a row, say
        return None
    if (
        not with_turn.startswith(plain)
        or not with_header.startswith(plain)
        or marker not in with_turn
    ):
        return None
    turn = with_turn[len(plain) :]
    prefix, suffix = turn.split(marker, 1)
    return _TurnFormat(turn_prefix=prefix, turn_suffix=suffix, header=with_header[len(plain) :])


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def teacher_prompt(policy: Policy, prompt_tokens: list[int], feedback: str) -> list[int]:
    """The student's prompt with a user turn holding `feedback` before the assistant header.

    Works in token space so the teacher context starts with exactly the student's tokens
    (the KV prefix is shared with the student): the trailing assistant header is cut
    off, the feedback turn and the header appended. Without a chat template the feedback
    is appended as plain text.
    """
    tokenizer = policy.tokenizer
    fmt = _turn_format(tokenizer)
    if fmt is None:
        return [*prompt_tokens, *_encode(tokenizer, f"\n\n{feedback}\n\n")]
    header = _encode(tokenizer, fmt.header)
    base = list(prompt_tokens)
    if header and base[-len(header) :] == header:
        base = base[: -len(header)]
    turn = _encode(tokenizer, fmt.turn_prefix + feedback + fmt.turn_suffix)
    return [*base, *turn, *header]


def demonstration_tokens(policy: Policy, call: ToolCall) -> list[int]:
    """Tokens of `call` exactly as the student would write it (ends with end-of-turn)."""
    return list(policy.renderer.render_call(call))


def _demonstration_text(policy: Policy, tokens: list[int]) -> str:
    eos = {policy.tokenizer.eos_token_id, getattr(policy.renderer, "end_of_turn_id", None)}
    body = [t for t in tokens if t not in eos]
    return str(policy.tokenizer.decode(body, clean_up_tokenization_spaces=False)).strip()


# -- teacher scoring --------------------------------------------------------------------------


@dataclass
class TeacherScores:
    logprobs: list[float]  # of each scored token
    topk_ids: list[list[int]] | None = None
    topk_logprobs: list[list[float]] | None = None


def ensure_ema_teacher(policy: LocalPolicy) -> None:
    """Create the `ema` adapter (once per process): the teacher saved with the loaded
    version if there is one (`training.save_adapter` writes it), else a copy of the
    trained adapter."""
    model = policy.model
    if EMA_ADAPTER in model.peft_config:
        return
    model.add_adapter(EMA_ADAPTER, model.peft_config[training.TRAINED_ADAPTER])
    # add_adapter may mark the new adapter trainable; set_adapter(default) freezes it again.
    model.set_adapter(training.TRAINED_ADAPTER)
    state = training.saved_companion(policy, EMA_ADAPTER) or training.adapter_state(policy)
    with torch.no_grad():
        training.set_adapter_state(policy, state, adapter=EMA_ADAPTER)
    training.invalidate_prefix_cache(policy)


@torch.no_grad()
def update_ema_teacher(policy: LocalPolicy, rate: float) -> None:
    """θ_ema ← (1 − rate)·θ_ema + rate·θ, tensor by tensor, in place."""
    ensure_ema_teacher(policy)
    student = dict(policy.model.named_parameters())
    for name, param in policy.model.named_parameters():
        if f".{EMA_ADAPTER}." not in name:
            continue
        source = student.get(name.replace(f".{EMA_ADAPTER}.", f".{training.TRAINED_ADAPTER}."))
        if source is not None:
            param.lerp_(source.detach(), rate)
    training.invalidate_prefix_cache(policy)


def grammar_masks(policy: Policy, tokens: list[int]) -> list[torch.Tensor | None]:
    """The decoding grammar's allowed-token mask at each position of `tokens`.

    Why: the sampler only ever chooses among the tokens the grammar allows, and the raw
    distribution of a 135M model at a constrained position is mostly junk (its raw
    logprob of `{"` is ~−10; only the grammar makes it write JSON). A teacher with a call
    in view is much surer of the JSON framing than the student, so raw teacher − student
    gaps are dominated by format, not by the reviewer's point: on a denied `read` call
    the forced `tool` token had advantage +7.9 and the denied call's logprob *rose* after
    a step. Comparing both under the grammar's mask (renormalised over the allowed
    tokens, as the sampler sees them) removes that bias: forced tokens score 0 for both
    (advantage 0), and at a real decision the comparison is among valid alternatives.

    Replays the grammar over `tokens` (fast-forward tokens count as forced: one-hot
    masks). None where no mask applies: no grammar (a remote backend), past the point
    where the grammar stopped, or a token it rejects.
    """
    if not policy.scores_locally or not tokens:
        return [None] * len(tokens)
    local = cast("LocalPolicy", policy)
    try:
        from continual_lsp.policy.grammar import allowed_mask

        vocab = int(local.model.get_output_embeddings().weight.shape[0])
        matcher = local.grammar.matcher()
        out: list[torch.Tensor | None] = []
        while len(out) < len(tokens) and not matcher.is_error():
            i = len(out)
            ff = list(matcher.compute_ff_tokens())
            if ff and tokens[i : i + len(ff)] == ff:
                for token in ff:
                    one = torch.zeros(vocab, dtype=torch.bool)
                    one[token] = True
                    out.append(one)
                matcher.consume_tokens(ff)
                continue
            mask = allowed_mask(matcher, vocab)
            if not bool(mask[tokens[i]]) or not matcher.consume_token(tokens[i]):
                break
            out.append(mask)
        return out + [None] * (len(tokens) - len(out))
    except Exception as exc:  # a grammar change must not stop learning: score unmasked
        log.warning("could not replay the grammar over the call (%s); scoring unmasked", exc)
        return [None] * len(tokens)


def _renormalise(log_probs: torch.Tensor, masks: list[torch.Tensor | None] | None) -> torch.Tensor:
    """Each row's log-distribution restricted to its mask and renormalised (None: as is)."""
    if not masks or all(m is None for m in masks):
        return log_probs
    rows = []
    for row, mask in zip(log_probs, masks, strict=True):
        if mask is None:
            rows.append(row)
        else:
            kept = row.masked_fill(~mask.to(row.device), float("-inf"))
            rows.append(kept - torch.logsumexp(kept, dim=-1))
    return torch.stack(rows)


def _teacher_log_probs(
    policy: LocalPolicy,
    prompt: list[int],
    tokens: list[int],
    teacher: str,
    trust_region_rate: float,
) -> torch.Tensor:
    """Teacher log-distribution `(T, V)` at each position of `tokens` after `prompt`."""
    weights = EMA_ADAPTER if teacher == "ema" else training.TRAINED_ADAPTER
    if teacher == "ema":
        ensure_ema_teacher(policy)
    logits = training.completion_logits(policy, prompt, tokens, weights)
    current = torch.log_softmax(logits.float(), -1)
    if teacher != "trust_region" or trust_region_rate <= 0:
        return current
    reference = torch.log_softmax(
        training.completion_logits(policy, prompt, tokens, training.REFERENCE).float(), -1
    )
    rho = min(max(trust_region_rate, 0.0), 1.0)
    if rho >= 1.0:
        return reference
    return torch.logaddexp(current + math.log1p(-rho), reference + math.log(rho))


def _pick(log_probs: torch.Tensor, tokens: list[int]) -> list[float]:
    ids = torch.tensor(tokens, dtype=torch.long, device=log_probs.device)
    return [float(x) for x in log_probs.gather(1, ids[:, None])[:, 0].tolist()]


def teacher_scores(
    policy: Policy,
    prompt: list[int],
    tokens: list[int],
    *,
    teacher: str = "current",
    topk: int = 0,
    trust_region_rate: float = 0.0,
    masks: list[torch.Tensor | None] | None = None,
) -> TeacherScores:
    """Teacher logprobs of `tokens` (grammar-renormalised where `masks` apply) and, when
    `topk`, the teacher's raw top-k support per position (for `topk_distill`)."""
    if not tokens:
        return TeacherScores([], [] if topk else None, [] if topk else None)
    if not policy.scores_locally:
        # Scalar logprobs of the current weights only.
        if topk or teacher != "current":
            raise ValueError(f"teacher={teacher!r}, topk={topk} need the local backend")
        return TeacherScores(logprobs=list(policy.logprobs(prompt, tokens)))
    log_probs = _teacher_log_probs(
        cast("LocalPolicy", policy), prompt, tokens, teacher, trust_region_rate
    )
    scores = TeacherScores(logprobs=_pick(_renormalise(log_probs, masks), tokens))
    if topk:
        values, indices = torch.topk(log_probs, k=min(topk, log_probs.shape[-1]), dim=-1)
        scores.topk_ids = indices.tolist()
        scores.topk_logprobs = values.tolist()
    return scores


def student_logprobs(
    policy: Policy,
    prompt: list[int],
    tokens: list[int],
    masks: list[torch.Tensor | None] | None = None,
) -> list[float]:
    """Current weights' logprobs of `tokens` (grammar-renormalised where `masks` apply)."""
    if not tokens:
        return []
    if not policy.scores_locally:
        return list(policy.logprobs(prompt, tokens))
    # Prefix-cached: the KV of `prompt` is reused by the training step that follows.
    logits = training.completion_logits(cast("LocalPolicy", policy), prompt, tokens)
    return _pick(_renormalise(torch.log_softmax(logits.float(), -1), masks), tokens)


def sampler_logprobs(policy: Policy, prompt: list[int], tokens: list[int]) -> list[float]:
    """Logprobs as the grammar-constrained sampler sees them (what decides a proposal)."""
    return student_logprobs(policy, prompt, tokens, grammar_masks(policy, tokens))


# -- datums and the step ----------------------------------------------------------------------


def build_datums(
    policy: Policy, job: SdpoJob, settings: Settings, config: SdpoConfig | None = None
) -> list[Datum]:
    """The step's training examples (see the module docstring); raises NothingToLearn.

    `config.grammar_mask` (default True): score advantages under the grammar's mask
    (`grammar_masks`). `old_logprobs` stay raw (the IS ratio compares raw model
    probabilities, which is what the loss differentiates).
    """
    config = config or SdpoConfig.from_settings(settings)
    demo_call = job.demonstration_call()
    demo = demonstration_tokens(policy, demo_call) if demo_call is not None else []
    has_correction = bool(job.correction and job.correction.strip())
    if not demo and not has_correction:
        raise NothingToLearn(f"proposal {job.proposal_id}: no correction and no demonstration")
    if job.signal == "approved_retry" and not demo:
        raise NothingToLearn(f"proposal {job.proposal_id}: approved_retry without a demonstration")
    examples = [
        _demonstration_text(policy, demonstration_tokens(policy, ToolCall.model_validate(e)))
        for e in job.examples
    ]
    feedback = feedback_text(
        job.correction, _demonstration_text(policy, demo) if demo else None, examples
    )
    t_prompt = teacher_prompt(policy, job.prompt_tokens, feedback)
    topk = settings.topk if settings.loss_mode == "topk" else 0

    targets: list[tuple[list[int], list[float] | None]] = []
    if job.signal != "approved_retry" and job.tokens:
        behaviour = job.logprobs if len(job.logprobs) == len(job.tokens) else None
        targets.append((job.tokens, behaviour))
    if demo:
        targets.append((demo, None))

    datums = []
    for tokens, behaviour in targets:
        masks = grammar_masks(policy, tokens) if config.grammar_mask else None
        if policy.scores_locally:
            raw = torch.log_softmax(
                training.completion_logits(
                    cast("LocalPolicy", policy), job.prompt_tokens, tokens
                ).float(),
                -1,
            )
            raw_student = _pick(raw, tokens)
            student = _pick(_renormalise(raw, masks), tokens)
        else:
            raw_student = student = student_logprobs(policy, job.prompt_tokens, tokens)
        scores = teacher_scores(
            policy,
            t_prompt,
            tokens,
            teacher=settings.teacher,
            topk=topk,
            trust_region_rate=config.trust_region_rate,
            masks=masks,
        )
        datums.append(
            Datum(
                prompt_tokens=job.prompt_tokens,
                completion_tokens=tokens,
                advantages=[t - s for t, s in zip(scores.logprobs, student, strict=True)],
                old_logprobs=behaviour if behaviour is not None else raw_student,
                teacher_topk_ids=scores.topk_ids,
                teacher_topk_logprobs=scores.topk_logprobs,
                loss_weights=_unforced(masks) if topk and masks else None,
            )
        )
    return datums


def _unforced(masks: list[torch.Tensor | None]) -> list[float]:
    """1 where the model chose among several tokens, 0 where the grammar allowed one."""
    return [0.0 if m is not None and int(m.sum()) == 1 else 1.0 for m in masks]


def loss_name(settings: Settings) -> LossName:
    return "topk_distill" if settings.loss_mode == "topk" else "importance_sampling"


# Later steps on the same datums stop once the clamp engaged on more than this share of the
# tokens: the weights have left the region where the stored scores mean anything.
TRUST_REGION_CLIPPED = 0.5


def sdpo_step(
    policy: Policy,
    job_payload: SdpoJob | dict[str, Any],
    settings: Settings,
    replay: Sequence[SdpoJob] = (),
    **options: Any,
) -> TrainMetrics:
    """SDPO for one reviewer signal: one step, or up to `steps_per_correction` on the same
    datums; returns the last step's metrics (`seconds` and `tokens` summed).

    `replay`: earlier jobs of the same cluster, newest first; the first
    `replay_same_cluster` that still carry a signal join the batch. `options` override
    `SdpoConfig.from_settings(settings)` field by field (`lr`, `trust_region_rate`,
    `grammar_mask`, `max_grad_norm`, …); an unknown one is a ValidationError. Raises
    `NothingToLearn` when the job has neither a correction nor a demonstration.
    """
    config = SdpoConfig.from_settings(settings, **options)
    job = job_payload if isinstance(job_payload, SdpoJob) else SdpoJob.model_validate(job_payload)
    datums = build_datums(policy, job, settings, config)
    replayed = 0
    for earlier in replay:
        if replayed >= config.replay_same_cluster:
            break
        try:
            datums += build_datums(policy, earlier, settings, config)
            replayed += 1
        except NothingToLearn:
            continue
    metrics = None
    seconds, tokens, steps = 0.0, 0, 0
    for _ in range(config.steps_per_correction):
        metrics = policy.train_step(
            datums, loss_name(settings), config.lr, **config.train_options()
        )
        steps += 1
        seconds, tokens = seconds + metrics.seconds, tokens + metrics.tokens
        if settings.teacher == "ema":
            update_ema_teacher(cast("LocalPolicy", policy), settings.teacher_update_rate)
        if metrics.clipped_fraction > TRUST_REGION_CLIPPED:
            break
    assert metrics is not None  # steps_per_correction ≥ 1
    metrics = metrics.model_copy(update={"seconds": seconds, "tokens": tokens})
    log.info(
        "sdpo on %s (%s): %d step(s), %d replayed; loss %.4f kl %.4f adv %.3f ratio %.3f in %.2fs",
        job.proposal_id,
        job.signal,
        steps,
        replayed,
        metrics.loss,
        metrics.kl,
        metrics.mean_advantage,
        metrics.mean_ratio,
        metrics.seconds,
    )
    return metrics
