"""Pure torch losses for SDPO on the local backend (no model, no I/O).

Shapes: `T` completion positions, `V` vocabulary, `K` top-k support. Every per-token
function returns a `(..., T)` tensor; `masked_mean` reduces it. The runtime does not import
TRL (its import alone costs ~6 s and pulls accelerate and datasets into the training
worker): these are small re-implementations of `trl.experimental.sdpo.loss_utils`, and
`tests/policy/test_losses.py` checks each one against TRL numerically (TRL is a dev extra).

The SDPO objective (DESIGN §4) is

    loss = −mean_t( w_t · adv_t · log π(y_t) ) + β · mean_t KL_t(π ‖ π_ref)
    w_t  = sg( clamp( π(y_t) / π_old(y_t), low, high ) )

`sg` is stop-gradient. This is the CISPO form, not PPO's: PPO takes
`min(r·A, clip(r)·A)` with the ratio *inside* the gradient, which zeroes the gradient of
every token outside the trust region; here the clamped ratio is a constant weight, so a
clipped token still gets a (bounded) policy-gradient push `−w·adv·∇log π`. On-policy
(`π_old = π`) the weight is 1 and the loss is the plain token-level policy gradient, equal
to TRL's `compute_sampled_token_self_distillation_loss` (`(log π − log π_T).detach() · log π`
with `adv = log π_T − log π`). TRL's `apply_importance_sampling_clipping` is the same
weight with `low = 0`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def selective_log_softmax(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """log_softmax(logits)[..., index] without materialising the `(..., V)` log-probs.

    `index` is `(...)` (one id per position) or `(..., K)` (K ids per position).
    """
    lse = torch.logsumexp(logits.float(), dim=-1)
    if index.dim() == logits.dim() - 1:
        picked = torch.gather(logits.float(), -1, index.unsqueeze(-1)).squeeze(-1)
        return picked - lse
    return torch.gather(logits.float(), -1, index) - lse.unsqueeze(-1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Token mean over every masked-in position of the batch (not a mean of row means)."""
    if mask is None:
        return values.mean()
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


@dataclass
class SurrogateTerms:
    """Per-token pieces of the clamped importance-sampling surrogate (all `(..., T)`)."""

    loss: torch.Tensor  # −w · adv · log π  (differentiable through log π only)
    ratio: torch.Tensor  # π / π_old, unclamped, detached
    weight: torch.Tensor  # clamp(ratio, low, high), detached
    clipped: torch.Tensor  # bool: the clamp changed the ratio


def clamped_is_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    low: float = 0.5,
    high: float = 2.0,
) -> SurrogateTerms:
    """Per-token `−sg(clamp(π/π_old, low, high)) · adv · log π` (see the module docstring).

    The log-ratio is clamped to ±20 before `exp` (as TRL does) so a very stale behaviour
    policy gives a large but finite ratio that the clamp then bounds.
    """
    log_ratio = (logprobs.detach() - old_logprobs).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    weight = ratio.clamp(min=low, max=high)
    clipped = (ratio < low) | (ratio > high)
    loss = -(weight * advantages * logprobs)
    return SurrogateTerms(loss=loss, ratio=ratio, weight=weight, clipped=clipped)


def cross_entropy(logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token negative log-likelihood (a demonstration's tokens pushed up, weight 1)."""
    return -logprobs


def full_kl(student_logits: torch.Tensor, reference_logits: torch.Tensor) -> torch.Tensor:
    """Exact per-token reverse KL(π ‖ π_ref) = Σ_v π_v (log π_v − log π_ref,v) over the vocab.

    Gradient flows into the student only; the reference is detached. Equals TRL's
    `compute_divergence(student, reference, alpha=1.0)`.
    """
    student = torch.log_softmax(student_logits.float(), dim=-1)
    reference = torch.log_softmax(reference_logits.detach().float(), dim=-1)
    return (student.exp() * (student - reference)).sum(-1)


def add_tail_bucket(log_probs: torch.Tensor) -> torch.Tensor:
    """Append one category holding `1 − Σ top-k` so the support sums to exactly 1.

    Same as TRL's `add_tail_bucket`: the captured mass is clamped just below 1 so the tail
    log stays finite when the top-k already holds (numerically) all the mass.
    """
    log_mass = torch.logsumexp(log_probs, dim=-1, keepdim=True).clamp(max=-1e-7)
    tail = torch.log(-torch.expm1(log_mass))
    return torch.cat([log_probs, tail], dim=-1)


def divergence(
    student_log_probs: torch.Tensor, teacher_log_probs: torch.Tensor, alpha: float
) -> torch.Tensor:
    """Generalised JSD over the last axis, as TRL's `compute_divergence`.

    `alpha = 1`: reverse KL(student ‖ teacher) (mode seeking, SDPO's default);
    `alpha = 0`: forward KL(teacher ‖ student); in between: the α-skewed JSD through the
    mixture `m = (1−α)·student + α·teacher`.
    """
    s, t = student_log_probs, teacher_log_probs
    if alpha == 1.0:
        return (s.exp() * (s - t)).sum(-1)
    if alpha == 0.0:
        return (t.exp() * (t - s)).sum(-1)
    a = torch.tensor(alpha, dtype=s.dtype, device=s.device)
    mixture = torch.logsumexp(torch.stack([s + torch.log(1 - a), t + torch.log(a)]), dim=0)
    kl_teacher = (t.exp() * (t - mixture)).sum(-1)
    kl_student = (s.exp() * (s - mixture)).sum(-1)
    return torch.lerp(kl_student, kl_teacher, a)


def topk_tail_distill(
    student_logits: torch.Tensor,
    teacher_topk_ids: torch.Tensor,
    teacher_topk_logprobs: torch.Tensor,
    alpha: float = 1.0,
) -> torch.Tensor:
    """Per-token divergence on the teacher's top-k support plus one tail bucket.

    The teacher's K most likely ids at each position (and their true log-probs, which sum
    to the captured mass ≤ 1) define the support; the student's log-probs are gathered at
    the same ids; each side gets a tail bucket with its leftover mass; then
    `divergence(·, ·, alpha)`. With the tail the K+1 categories approximate the full-vocab
    divergence while only K teacher numbers per position need storing (they travel in
    `Datum.teacher_topk_*`). Mirrors TRL's server path (teacher support).
    """
    student = add_tail_bucket(selective_log_softmax(student_logits, teacher_topk_ids))
    teacher = add_tail_bucket(teacher_topk_logprobs.detach().float())
    return divergence(student, teacher, alpha)
