"""SDPO: what a reviewer's denial or edit does to the weights (DESIGN §4).

One job = one reviewer signal about one proposal. `sdpo_step` turns it into one LoRA
step (more with the options at the end of this docstring):

1. **Teacher context** (`learning/teacher_context.py`): the student's own prompt with the
   reviewer's correction and, when one exists, a demonstration spliced in as one extra
   user turn; never the denied call.
2. **Scores** (`learning/scoring.py`). Teacher logprobs of the proposal's tokens `y` (and
   of the demonstration's tokens), and the current student's logprobs of the same tokens
   in the plain prompt, both under the decoding grammar's mask; the teacher is the
   current weights, an EMA of them, or a trust region towards the reference. The
   student's forward is the step's own (`LogitScorer.log_distributions(for_step=True)`):
   the local backend runs it once, with gradients, and the step backpropagates it.
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

More from one correction (issue 33; both off by default, `Settings`): `steps_per_correction`
repeats the step on the same datums until the IS clamp engages on most tokens (the
trust region: the stored scores stop describing the weights), and `replay_same_cluster`
adds earlier corrections of the same cluster (`SdpoJob.cluster`, the lane item a denial
was routed to) to each new step's batch, re-scored under the current weights.

`SdpoConfig` sits beside the step, as TRL keeps its config beside its trainer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from continual_lsp.config import Settings
from continual_lsp.learning.scoring import (
    pick,
    renormalise,
    student_logprobs,
    teacher_scores,
)
from continual_lsp.learning.teacher_context import (
    call_text,
    demonstration_tokens,
    feedback_text,
    teacher_prompt,
)
from continual_lsp.policy.base import Datum, LossName, Policy, TrainMetrics, TrainOptions
from continual_lsp.tools.base import ToolCall

log = logging.getLogger(__name__)

JOB_KIND = "sdpo"

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
    grammar_mask: bool = True  # advantages under the grammar's mask (`LogitScorer`)
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


def build_datums(
    policy: Policy, job: SdpoJob, settings: Settings, config: SdpoConfig | None = None
) -> list[Datum]:
    """The step's training examples (see the module docstring); raises NothingToLearn.

    `config.grammar_mask` (default True): score advantages under the grammar's mask
    (`LogitScorer.grammar_masks`; none off-box). `old_logprobs` stay raw (the IS ratio
    compares raw model probabilities, which is what the loss differentiates).
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
        call_text(policy, demonstration_tokens(policy, ToolCall.model_validate(e)))
        for e in job.examples
    ]
    feedback = feedback_text(job.correction, call_text(policy, demo) if demo else None, examples)
    t_prompt = teacher_prompt(policy, job.prompt_tokens, feedback)
    topk = settings.topk if settings.loss_mode == "topk" else 0

    targets: list[tuple[list[int], list[float] | None]] = []
    if job.signal != "approved_retry" and job.tokens:
        behaviour = job.logprobs if len(job.logprobs) == len(job.tokens) else None
        targets.append((job.tokens, behaviour))
    if demo:
        targets.append((demo, None))

    scorer = policy.logit_scorer()
    datums = []
    for tokens, behaviour in targets:
        masks = scorer.grammar_masks(tokens) if scorer is not None and config.grammar_mask else None
        if scorer is not None:
            raw = scorer.log_distributions(job.prompt_tokens, tokens, for_step=True)
            raw_student = pick(raw, tokens)
            student = pick(renormalise(raw, masks), tokens)
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
    *,
    anchors: Sequence[Datum] = (),
    **options: Any,
) -> TrainMetrics:
    """SDPO for one reviewer signal: one step, or up to `steps_per_correction` on the same
    datums; returns the last step's metrics (`seconds` and `tokens` summed).

    `replay`: earlier jobs of the same cluster, newest first; the first
    `replay_same_cluster` that still carry a signal join the batch. `anchors`: calls
    the step keeps likely (`learning/anchors.py`), added to the batch as they are.
    `options` override
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
    datums += anchors
    # Off-box, build_datums has already refused the ema teacher (`teacher_scores`).
    ema = policy.logit_scorer() if settings.teacher == "ema" else None
    metrics = None
    seconds, tokens, steps = 0.0, 0, 0
    for _ in range(config.steps_per_correction):
        metrics = policy.train_step(
            datums, loss_name(settings), config.lr, **config.train_options()
        )
        steps += 1
        seconds, tokens = seconds + metrics.seconds, tokens + metrics.tokens
        if ema is not None:
            ema.update_ema_teacher(settings.teacher_update_rate)
        if metrics.clipped_fraction > TRUST_REGION_CLIPPED:
            break
    assert metrics is not None  # steps_per_correction ≥ 1
    metrics = metrics.model_copy(update={"seconds": seconds, "tokens": tokens})
    log.info(
        "sdpo on %s (%s): %d step(s), %d replayed, %d anchors; "
        "loss %.4f kl %.4f adv %.3f ratio %.3f in %.2fs",
        job.proposal_id,
        job.signal,
        steps,
        replayed,
        len(anchors),
        metrics.loss,
        metrics.kl,
        metrics.mean_advantage,
        metrics.mean_ratio,
        metrics.seconds,
    )
    return metrics
