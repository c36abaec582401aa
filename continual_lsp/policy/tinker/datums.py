"""Tinker datums whose server-side loss equals the local `train_step` loss (DESIGN §3).

Pure helpers, no network: datum building, logprob slicing, the step's metrics, and
Tinker's documented losses in torch for the contract tests.

**The SDPO step on Tinker.** Tinker computes the learner's logprobs and the backward pass on
its servers and applies one of a few built-in losses; we choose the inputs. The local loss
(`losses.clamped_is_surrogate`, token mean over the batch) is

    L_local = (1/N) Σ_t −sg(clamp(π_t/π_old,t, lo, hi)) · adv_t · log π_t   (+ β·KL)

and Tinker's documented `cispo` loss with `clip_low_threshold=lo, clip_high_threshold=hi` is

    L_cispo = Σ_t −sg(clamp(exp(log π_t − logprobs_t), lo, hi)) · advantages_t · log π_t

(`importance_sampling` has no clip, so it is not the SDPO objective). So the datum carries
`logprobs = log π_old` and `advantages = adv/N`: then L_cispo equals the surrogate part of
L_local term by term, in value and in gradient, for any ratio
(tests/policy/tinker/test_tinker_contract.py checks both on a real model). Prompt positions
carry advantage 0 and contribute nothing.

**KL to the reference, folded into the advantages.** Tinker has no reference term and only
scalar logprobs, so the full-vocabulary KL of the local backend is replaced by its
sampled-token score-function form: `adv'_t = adv_t − β·(log π_old,t − log π_ref,t)`, with
`log π_ref` scored by a sampling client of the base weights. Its gradient,
`β·w_t·(log π_old − log π_ref)·∇log π`, equals the local `β·∇KL` *in expectation over
y ~ π_old* at the on-policy point (w = 1): `∇KL(π‖π_ref) = E_y~π[(log π(y) − log π_ref(y))
∇log π(y)]`. It is an unbiased one-sample estimate, not the same number (the contract test
checks the expectation exactly by enumeration). It is folded into every
`importance_sampling` datum. On a demonstration datum (learning/sdpo.py scores the reviewer's
call as an IS datum with `old = current`) the tokens were not sampled from π, so there the
same term is the gradient of `β/2·(log π(d) − log π_ref(d))²` per token — a pull toward the
reference, not a KL estimate. Plain `cross_entropy` datums get no KL term.

**Failure.** A missing key, an unreachable service, a timeout, or a refusal (auth, billing,
overload) raises `BackendUnavailable` with a message for the reviewer; the caller keeps the
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from continual_lsp.policy.base import Datum, LossName, TrainMetrics

if TYPE_CHECKING:
    import tinker


def completion_logprobs(
    prompt_logprobs: Sequence[float | None], prompt_len: int, completion_len: int
) -> list[float]:
    """The completion's slice of a `compute_logprobs` result on `prompt + completion`.

    Tinker returns one entry per input token, entry i = log p(token i | tokens < i), entry 0
    None. The completion occupies input positions `[P, P+T)`, so its logprobs are
    `[P : P+T]` — not `[P-1 : P+T-1]`, which is the shifted-target convention of a raw
    logits tensor and would score every token with its predecessor's logprob.
    """
    if len(prompt_logprobs) != prompt_len + completion_len:
        raise ValueError(
            f"compute_logprobs returned {len(prompt_logprobs)} entries for "
            f"{prompt_len} + {completion_len} tokens"
        )
    picked = list(prompt_logprobs[prompt_len : prompt_len + completion_len])
    if any(x is None for x in picked):
        raise ValueError("compute_logprobs returned no logprob for a completion token")
    return [float(x) for x in picked if x is not None]


def fold_kl(
    advantages: Sequence[float],
    old_logprobs: Sequence[float],
    ref_logprobs: Sequence[float],
    kl_coef: float,
) -> list[float]:
    """`adv_t − β·(log π_old,t − log π_ref,t)`: the sampled-token KL penalty as advantage."""
    if not (len(advantages) == len(old_logprobs) == len(ref_logprobs)):
        raise ValueError("advantages, old and reference logprobs must align")
    return [
        a - kl_coef * (o - r)
        for a, o, r in zip(advantages, old_logprobs, ref_logprobs, strict=True)
    ]


@dataclass
class TinkerBatch:
    """The datums of one step, and what is needed to report it as the local backend does."""

    datums: list[tinker.Datum]
    loss_fn: str  # "cispo" or "cross_entropy"
    loss_fn_config: dict[str, float] | None
    total_tokens: int  # N: completion tokens in the batch (the local token-mean denominator)
    prompt_lens: list[int]
    old_logprobs: list[list[float]]  # per datum, completion positions (empty: plain CE)
    pg_advantages: list[list[float]]  # the local loss's `adv` in −w·adv·log π (CE: ones)
    reported_advantages: list[list[float]]  # the datum's advantages (zeros when absent)
    kl_terms: list[list[float]]  # per datum, log π_old − log π_ref (empty: no KL folded)


def _advantages(
    datum: Datum, loss: LossName, old: list[float], ref: Sequence[float] | None, kl_coef: float
) -> tuple[list[float], list[float], list[float]]:
    """(policy-gradient advantages, the same with the KL folded in, the KL term per token)."""
    n = len(datum.completion_tokens)
    if loss != "importance_sampling":  # cross_entropy: −w·log π is the surrogate with adv 1
        return [1.0] * n, [1.0] * n, []
    if len(datum.advantages) != n:
        raise ValueError(f"importance_sampling needs {n} advantages, got {len(datum.advantages)}")
    pg_adv = list(datum.advantages)
    if kl_coef > 0 and ref is not None:
        kl_term = [o - r for o, r in zip(old, ref, strict=True)]
        return pg_adv, fold_kl(pg_adv, old, ref, kl_coef), kl_term
    return pg_adv, pg_adv, []


def build_tinker_batch(
    batch: Sequence[Datum],
    loss: LossName,
    *,
    old_logprobs: Sequence[Sequence[float]] | None = None,
    ref_logprobs: Sequence[Sequence[float] | None] | None = None,
    kl_coef: float = 0.0,
    clip_low: float = 0.5,
    clip_high: float = 2.0,
) -> TinkerBatch:
    """Tinker datums whose server-side loss equals the local `train_step` loss.

    Layout (the cookbook's): `model_input = (prompt + completion)[:-1]`, `target_tokens =
    (prompt + completion)[1:]`; input position `P-1+t` predicts completion token `t`. Per
    position arrays have length `P+T-1`; prompt positions get advantage/weight 0.

    - `importance_sampling` → `cispo` with the clamp bounds; `logprobs` = old logprobs
      (the datum's, else `old_logprobs[i]`: the current weights, i.e. on-policy);
      `advantages` = (adv − β·(old − ref)) / N.
    - `cross_entropy` with old logprobs → `cispo` with advantages 1/N (the local CE term is
      `−w·log π` with the same clamped weight w); without → `cross_entropy`, weights 1/N.
    - `topk_distill` needs the teacher's full distribution: refused (local backend only).
    """
    import tinker

    if loss == "topk_distill":
        raise ValueError(
            "topk_distill needs full-vocabulary teacher distributions, which Tinker's scalar "
            "logprobs cannot give; use loss_mode='token' with the Tinker backend"
        )
    if not batch:
        raise ValueError("train_step needs at least one datum")
    total = sum(len(d.completion_tokens) for d in batch)
    if total == 0:
        raise ValueError("train_step got only empty completions")
    use_ratio = loss == "importance_sampling" or any(d.old_logprobs for d in batch)
    out = TinkerBatch(
        [], "cispo" if use_ratio else "cross_entropy", None, total, [], [], [], [], []
    )
    if use_ratio:
        out.loss_fn_config = {"clip_low_threshold": clip_low, "clip_high_threshold": clip_high}
    for i, datum in enumerate(batch):
        n = len(datum.completion_tokens)
        p = len(datum.prompt_tokens)
        if n == 0:
            continue
        if p == 0:
            raise ValueError("a Tinker datum needs a non-empty prompt")
        old = list(datum.old_logprobs) or (
            list(old_logprobs[i]) if old_logprobs is not None else []
        )
        if use_ratio and len(old) != n:
            raise ValueError(f"datum {i}: {len(old)} old logprobs for {n} completion tokens")
        ref = ref_logprobs[i] if ref_logprobs is not None else None
        pg_adv, folded, kl_term = _advantages(datum, loss, old, ref, kl_coef)
        full = [*datum.prompt_tokens, *datum.completion_tokens]
        pad = [0.0] * (p - 1)
        if use_ratio:
            inputs: dict[str, Any] = {
                "target_tokens": full[1:],
                "logprobs": pad + old,
                "advantages": pad + [a / total for a in folded],
            }
        else:
            inputs = {"target_tokens": full[1:], "weights": pad + [1.0 / total] * n}
        out.datums.append(
            tinker.Datum(model_input=tinker.ModelInput.from_ints(full[:-1]), loss_fn_inputs=inputs)
        )
        out.prompt_lens.append(p)
        out.old_logprobs.append(old if use_ratio else [])
        out.pg_advantages.append(pg_adv)
        out.reported_advantages.append(list(datum.advantages) or [0.0] * n)
        out.kl_terms.append(kl_term)
    return out


def batch_metrics(
    tb: TinkerBatch,
    learner_logprobs: Sequence[Sequence[float]],
    *,
    kl_coef: float,
    clip_low: float,
    clip_high: float,
    seconds: float,
) -> TrainMetrics:
    """The step's metrics in the local backend's terms, from Tinker's returned logprobs.

    `learner_logprobs[i]` is datum i's `logprobs` output (one per input position, the
    pre-step weights). `loss` is the local objective's value: the clamped surrogate's token
    mean, plus `β·mean(log π − log π_ref)` where KL was folded in (the sampled-token
    estimate; the local backend adds the exact full-vocab KL, so those parts agree in
    expectation only). `kl` is the mean `log π_old − log π_ref` folded into the advantages.
    """
    n = tb.total_tokens
    loss = kl_sum = adv_sum = ratio_sum = clipped = 0.0
    for i, p in enumerate(tb.prompt_lens):
        pg_adv = tb.pg_advantages[i]
        lp = [float(x) for x in list(learner_logprobs[i])[p - 1 : p - 1 + len(pg_adv)]]
        old = tb.old_logprobs[i] or lp  # plain cross-entropy: ratio 1
        for t, (a, x, o) in enumerate(zip(pg_adv, lp, old, strict=True)):
            ratio = math.exp(max(-20.0, min(20.0, x - o)))
            weight = min(max(ratio, clip_low), clip_high)
            loss -= weight * a * x
            ratio_sum += ratio
            clipped += float(ratio < clip_low or ratio > clip_high)
            if tb.kl_terms[i]:
                kl = tb.kl_terms[i][t]
                kl_sum += kl
                loss += kl_coef * (x - (o - kl))  # β·(log π − log π_ref)
        adv_sum += sum(tb.reported_advantages[i])
    return TrainMetrics(
        loss=loss / n,
        kl=kl_sum / n,
        mean_advantage=adv_sum / n,
        mean_ratio=ratio_sum / n,
        clipped_fraction=clipped / n,
        seconds=seconds,
        tokens=n,
    )


def cispo_loss_reference(
    target_logprobs: Any, datum: tinker.Datum, clip_low: float, clip_high: float
) -> Any:
    """Tinker's documented `cispo` loss on one datum, in torch (for tests and audits).

    `target_logprobs` is the learner's `(N,)` logprob of `target_tokens` (differentiable).
    From the Tinker docs: `ratio = exp(target − logprobs)`, `clipped = clamp(ratio, lo, hi)`,
    `loss = −(clipped.detach() · target · advantages).sum()`.
    """
    import torch

    sampling = datum.loss_fn_inputs["logprobs"].to_torch()
    advantages = datum.loss_fn_inputs["advantages"].to_torch()
    ratio = torch.exp(target_logprobs - sampling)
    clipped = torch.clamp(ratio, clip_low, clip_high)
    return -(clipped.detach() * target_logprobs * advantages).sum()


def cross_entropy_loss_reference(target_logprobs: Any, datum: tinker.Datum) -> Any:
    """Tinker's documented `cross_entropy` loss: `−(target_logprobs · weights).sum()`."""
    return -(target_logprobs * datum.loss_fn_inputs["weights"].to_torch()).sum()
