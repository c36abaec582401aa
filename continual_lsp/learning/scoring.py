"""SDPO's scores: teacher and student logprobs of a call.

Per-token advantages (`learning/sdpo.py`) are `log π_T(y_t | teacher ctx) − log π(y_t |
ctx)`: negative where the teacher (who saw the fix) would not have written that token,
positive where it agrees.

Both sides are scored under the decoding grammar's mask (`LogitScorer.grammar_masks`)
and renormalised over the allowed tokens, as the sampler sees them. Why: the raw
distribution of a 135M model at a constrained position is mostly junk (its raw logprob
of `{"` is ~−10; only the grammar makes it write JSON), and a teacher with a call in view
is much surer of the JSON framing than the student, so raw teacher − student gaps are
dominated by format, not by the reviewer's point: on a denied `read` call the forced
`tool` token had advantage +7.9 and the denied call's logprob *rose* after a step. Under
the mask, forced tokens score 0 for both (advantage 0), and at a real decision the
comparison is among valid alternatives.

Teachers (`settings.teacher`): `current` — the student's own weights (shares the prompt's
KV prefix with the student); `ema` — an exponential moving average of the trained
adapter (`θ_T ← (1−ρ)θ_T + ρθ`, ρ = teacher_update_rate, after every step; kept by the
backend, `LogitScorer.update_ema_teacher`); `trust_region` — the current teacher mixed
with the frozen reference in probability space, `q = (1−ρ)·π_T + ρ·π_ref` (both on the
teacher context), ρ = `trust_region_rate` (default `teacher_update_rate`).

Full distributions come from the backend's `LogitScorer` (`Sampler.logit_scorer()`); off
the box (Tinker) only the current weights' logprobs of the scored tokens are at hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from continual_lsp.policy.base import LogitScorer, Policy


@dataclass
class TeacherScores:
    logprobs: list[float]  # of each scored token
    topk_ids: list[list[int]] | None = None
    topk_logprobs: list[list[float]] | None = None


def renormalise(log_probs: torch.Tensor, masks: list[torch.Tensor | None] | None) -> torch.Tensor:
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
    scorer: LogitScorer,
    prompt: list[int],
    tokens: list[int],
    teacher: str,
    trust_region_rate: float,
) -> torch.Tensor:
    """Teacher log-distribution `(T, V)` at each position of `tokens` after `prompt`."""
    current = scorer.log_distributions(prompt, tokens, "ema" if teacher == "ema" else "trained")
    if teacher != "trust_region" or trust_region_rate <= 0:
        return current
    reference = scorer.log_distributions(prompt, tokens, "reference")
    rho = min(max(trust_region_rate, 0.0), 1.0)
    if rho >= 1.0:
        return reference
    return torch.logaddexp(current + math.log1p(-rho), reference + math.log(rho))


def pick(log_probs: torch.Tensor, tokens: list[int]) -> list[float]:
    """Each position's logprob of its own token, from a `(T, V)` log-distribution."""
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
    scorer = policy.logit_scorer()
    if scorer is None:
        # Scalar logprobs of the current weights only.
        if topk or teacher != "current":
            raise ValueError(f"teacher={teacher!r}, topk={topk} need the local backend")
        return TeacherScores(logprobs=list(policy.logprobs(prompt, tokens)))
    log_probs = _teacher_log_probs(scorer, prompt, tokens, teacher, trust_region_rate)
    scores = TeacherScores(logprobs=pick(renormalise(log_probs, masks), tokens))
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
    scorer = policy.logit_scorer()
    if scorer is None:
        return list(policy.logprobs(prompt, tokens))
    # Prefix-cached: the KV of `prompt` is reused by the training step that follows.
    return pick(renormalise(scorer.log_distributions(prompt, tokens), masks), tokens)


def sampler_logprobs(policy: Policy, prompt: list[int], tokens: list[int]) -> list[float]:
    """Logprobs as the grammar-constrained sampler sees them (what decides a proposal)."""
    scorer = policy.logit_scorer()
    masks = scorer.grammar_masks(tokens) if scorer is not None else None
    return student_logprobs(policy, prompt, tokens, masks)
