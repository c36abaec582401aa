"""LoRA training for the local backend: scoring under chosen weights and `train_step`.

Everything here works on any object with `.model` (a peft `PeftModel` whose trainable
adapter is `"default"`) and `.adapter_version` (`kv_cache.LoraHolder`) — `LocalPolicy`
delegates its `train_step` here.

**Cost: the prompt is never backpropagated.** A step scores completions of ~30–100
tokens after prompts of 0.5–4k tokens. `train_step` runs the prompt (minus its last
token) once under `torch.no_grad` with a KV cache, then runs only `[last prompt token] +
completion[:-1]` with gradients on top of that cache. Gradient work and activation memory
scale with the completion, not the context. The reference model (adapter disabled) gets
its own prefix, and that one is cached across steps: its weights never change.

What dropping the prefix gradient loses: with LoRA on `k_proj`/`v_proj` (and on q/o,
which change the prefix's hidden states layer by layer), the prefix's keys and values are
functions of the adapter, so the true gradient has a second path, `∂loss/∂K_prefix ·
∂K_prefix/∂θ`. We treat the prefix K/V as constants. The loss *value* is exact (the cache
is computed with the current adapter), only that gradient path is dropped. Measured on
the embedded SmolLM2-135M (LoRA r16 on q,k,v,o), surrogate loss on a 38-token call:

    prompt       adapter          loss diff   cos(g_cached, g_full)   |g_full − g_cached|/|g_full|
    303 tokens   fresh (B = 0)    2e-7        0.80                    0.60
    303 tokens   after one step   4e-7        0.72                    0.70
    ~50 tokens   fresh / 1 step   < 1e-5      0.78 / 0.71             0.63 / 0.71

(`tests/policy/local/test_lora_step.py::test_prefix_gradient_drop_is_small` re-measures the
short case and requires cos > 0.5.) So the dropped path is large (|g_cached| is 70–75 % of
|g_full|, and the difference vector is 0.6–0.7 of |g_full|), but the kept part is well aligned with the true gradient (positive
inner product: every step still descends the true loss to first order). What is lost is
the adapter learning to re-read the context differently *for this call* (how the prompt
is encoded); what is kept is how the completion attends to and computes from it. We
take that trade because the prompt is 10–40× longer than the call: the gradient pass
then costs about what the call costs (`bench/sdpo_step.py`). `prefix_cache=False`
gives the exact full-backprop gradient.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import torch

from continual_lsp.policy import losses
from continual_lsp.policy.base import Datum, LossName, TrainMetrics
from continual_lsp.policy.local.kv_cache import (
    REFERENCE,
    TRAINED_ADAPTER,
    LoraHolder,
    forward,
    model_device,
    prefix_cache,
    use_weights,
)


def completion_logits(
    policy: LoraHolder,
    prompt_tokens: list[int],
    completion_tokens: list[int],
    weights: str = TRAINED_ADAPTER,
    *,
    grad: bool = False,
    use_prefix_cache: bool = True,
    keep_prefix: bool = True,
) -> torch.Tensor:
    """Logits `(T, V)` predicting each completion token, under `weights`.

    With the prefix cache, only `[prompt[-1]] + completion[:-1]` runs through the model
    (with gradients when `grad`); without it, the whole sequence runs (full backprop).
    `keep_prefix=False`: the prompt's K/V is not kept for later (`kv_cache.prefix_cache`).
    """
    if not prompt_tokens:
        raise ValueError("scoring needs a non-empty prompt")
    model = policy.model
    n = len(completion_tokens)
    grad_ctx = contextlib.nullcontext() if grad else torch.no_grad()
    if not use_prefix_cache:
        with grad_ctx, use_weights(model, weights):
            logits, _ = forward(model, prompt_tokens + completion_tokens, None, keep=n + 1)
        return logits[:-1]
    cache = prefix_cache(policy, prompt_tokens[:-1], weights, keep=keep_prefix)
    with grad_ctx, use_weights(model, weights):
        logits, _ = forward(model, [prompt_tokens[-1], *completion_tokens[:-1]], cache, keep=n)
    return logits


# The scores whose graph `score_for_step` keeps for the step: SDPO's sampled call and
# demonstration. More (replayed jobs) would hold more activations than they save time.
MAX_SCORED = 2


def score_for_step(
    policy: LoraHolder, prompt_tokens: list[int], completion_tokens: list[int]
) -> torch.Tensor:
    """`completion_logits` under the trained weights, its graph kept (up to `MAX_SCORED`)
    for the `train_step` that follows on the same prompt and completion.

    SDPO scores the student's call before the step and the step runs the same forward with
    gradients: ~1 s of a 2k-context step on 2 cores. The kept logits are valid until the
    weights change (`TrainState.bump` drops them); the step takes each at most once.
    """
    state = policy.train_state
    keep = torch.is_grad_enabled() and len(state.scored) < MAX_SCORED
    with train_precision(policy) if keep else contextlib.nullcontext():
        logits = completion_logits(policy, prompt_tokens, completion_tokens, grad=keep)
    if keep and logits.requires_grad:
        state.scored[(tuple(prompt_tokens), tuple(completion_tokens))] = logits
    return logits.detach()


def token_logprobs(
    policy: LoraHolder,
    prompt_tokens: list[int],
    completion_tokens: list[int],
    weights: str = TRAINED_ADAPTER,
) -> list[float]:
    """Logprob of each completion token under `weights` (no grad, prefix-cached)."""
    if not completion_tokens:
        return []
    logits = completion_logits(policy, prompt_tokens, completion_tokens, weights)
    ids = torch.tensor(completion_tokens, dtype=torch.long, device=logits.device)
    return [float(x) for x in losses.selective_log_softmax(logits, ids).tolist()]


def kl_to_reference(
    policy: LoraHolder, prompt_tokens: list[int], completion_tokens: list[int]
) -> list[float]:
    """Exact full-vocab KL(π ‖ π_ref) at each completion position, current weights."""
    student = completion_logits(policy, prompt_tokens, completion_tokens)
    reference = completion_logits(policy, prompt_tokens, completion_tokens, REFERENCE)
    return [float(x) for x in losses.full_kl(student, reference).tolist()]


# -- the step -------------------------------------------------------------------------------


def train_precision(policy: LoraHolder) -> contextlib.AbstractContextManager[Any]:
    """A training pass's precision: bf16 autocast where `TrainState.autocast` says so
    (the float32 adapter, its gradients and the optimizer untouched), else as it is."""
    dtype = policy.train_state.autocast
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(model_device(policy.model).type, dtype=dtype)


def trainable_parameters(model: Any) -> list[torch.nn.Parameter]:
    """The LoRA parameters of the trained adapter; refuses if anything else would train."""
    params = []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if "lora_" not in name or f".{TRAINED_ADAPTER}." not in name:
            raise RuntimeError(f"only the LoRA adapter may train, but {name} requires grad")
        params.append(param)
    if not params:
        raise RuntimeError("the model has no trainable LoRA parameters")
    return params


def _optimizer(policy: LoraHolder, lr: float) -> torch.optim.Optimizer:
    state = policy.train_state
    opt = state.optimizers.get(lr)
    if opt is None:
        # AdamW without weight decay: decay would pull the adapter toward zero (the base
        # model) between corrections, slowly forgetting what the reviewer taught.
        opt = torch.optim.AdamW(trainable_parameters(policy.model), lr=lr, weight_decay=0.0)
        state.optimizers[lr] = opt
    return opt


def train_step(
    policy: LoraHolder,
    batch: list[Datum],
    loss: LossName,
    lr: float,
    *,
    kl_coef: float = 0.0,
    clip_low: float = 0.5,
    clip_high: float = 2.0,
    alpha: float = 1.0,
    max_grad_norm: float | None = 1.0,
    prefix_cache: bool = True,
) -> TrainMetrics:
    """One AdamW step on the LoRA adapter over `batch`; returns the step's metrics.

    Per token `t` of every datum's completion (token mean over the whole batch):

    - `importance_sampling`: `−sg(clamp(π/π_old, clip_low, clip_high)) · adv_t · log π`
      (`losses.clamped_is_surrogate`); `old_logprobs` empty = on-policy (ratio 1).
    - `cross_entropy`: `−log π` (advantages ignored), weighted by the same clamped ratio
      when `old_logprobs` are given.
    - `topk_distill`: divergence(alpha) between the student and the datum's teacher top-k
      + tail bucket (`losses.topk_tail_distill`), times the clamped ratio when
      `old_logprobs` are given (TRL's `distillation_is_clip`).

    plus `kl_coef · KL(π ‖ π_ref)` over the full vocabulary (reference = adapter disabled;
    skipped when `kl_coef == 0`, and for a `rehearsal` datum). Gradients are clipped to
    `max_grad_norm`. Metrics are measured under the pre-step weights: `kl` is the mean
    per-token KL that entered the loss, `mean_ratio`/`clipped_fraction` describe π/π_old.
    `prefix_cache=False` backpropagates through the whole context (exact, slow).
    """
    start = time.perf_counter()
    if not batch:
        raise ValueError("train_step needs at least one datum")
    model = policy.model
    total = sum(len(d.completion_tokens) for d in batch)
    if total == 0:
        raise ValueError("train_step got only empty completions")
    opt = _optimizer(policy, lr)
    opt.zero_grad(set_to_none=True)

    sums = {"loss": 0.0, "kl": 0.0, "adv": 0.0, "ratio": 0.0, "clipped": 0.0}
    for datum in batch:
        if datum.completion_tokens:
            _check_datum(datum, loss)
            clip = (clip_low, clip_high)
            _backward(policy, datum, loss, total, sums, kl_coef, clip, alpha, prefix_cache)

    if not math.isfinite(sums["loss"]):
        opt.zero_grad(set_to_none=True)
        raise FloatingPointError(f"non-finite loss {sums['loss']}; the step was not applied")
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(trainable_parameters(model), max_grad_norm)
    opt.step()
    opt.zero_grad(set_to_none=True)
    state = policy.train_state
    state.steps += 1
    state.bump()
    return TrainMetrics(
        loss=sums["loss"],
        kl=sums["kl"] / total,
        mean_advantage=sums["adv"] / total,
        mean_ratio=sums["ratio"] / total,
        clipped_fraction=sums["clipped"] / total,
        seconds=time.perf_counter() - start,
        tokens=total,
    )


def _backward(
    policy: LoraHolder,
    datum: Datum,
    loss: LossName,
    total: int,
    sums: dict[str, float],
    kl_coef: float,
    clip: tuple[float, float],
    alpha: float,
    prefix_cache: bool,
) -> None:
    """Backpropagate one datum's share of the batch loss; add its numbers to `sums`.

    Sum / total tokens of the batch, datum by datum: the same gradient as one batched
    mean, with one datum's activations alive at a time (besides the up to `MAX_SCORED`
    kept by `score_for_step` until their datum's turn).
    """
    n = len(datum.completion_tokens)
    # Scored before the step under these weights (`score_for_step`): the same forward, its
    # graph kept. Not with full backprop, whose graph also runs through the prompt.
    key = (tuple(datum.prompt_tokens), tuple(datum.completion_tokens))
    logits = policy.train_state.scored.pop(key, None) if prefix_cache else None
    if logits is None:
        with train_precision(policy):
            logits = completion_logits(
                policy,
                datum.prompt_tokens,
                datum.completion_tokens,
                grad=True,
                use_prefix_cache=prefix_cache,
                keep_prefix=not datum.rehearsal,
            )
    logits = logits.float()
    device = logits.device
    ids = torch.tensor(datum.completion_tokens, dtype=torch.long, device=device)
    logp = losses.selective_log_softmax(logits, ids)
    old = (
        torch.tensor(datum.old_logprobs, dtype=torch.float32, device=device)
        if datum.old_logprobs
        else logp.detach()
    )
    adv = (
        torch.tensor(datum.advantages, dtype=torch.float32, device=device)
        if datum.advantages
        else torch.zeros(n, device=device)
    )
    terms = losses.clamped_is_surrogate(logp, old, adv, *clip)
    if loss == "importance_sampling":
        per_token = terms.loss
    elif loss == "cross_entropy":
        per_token = terms.weight * losses.cross_entropy(logp)
    else:  # topk_distill
        topk_ids = torch.tensor(datum.teacher_topk_ids, dtype=torch.long, device=device)
        topk_lps = torch.tensor(datum.teacher_topk_logprobs, dtype=torch.float32, device=device)
        per_token = terms.weight * losses.topk_tail_distill(logits, topk_ids, topk_lps, alpha)
    if datum.loss_weights is not None:
        per_token = per_token * torch.tensor(
            datum.loss_weights, dtype=per_token.dtype, device=device
        )
    if kl_coef > 0 and not datum.rehearsal:
        prompt, completion = datum.prompt_tokens, datum.completion_tokens
        with train_precision(policy):
            reference = completion_logits(
                policy, prompt, completion, REFERENCE, use_prefix_cache=prefix_cache
            )
        kl = losses.full_kl(logits, reference.float())
        per_token = per_token + kl_coef * kl
        sums["kl"] += float(kl.detach().sum())
    datum_loss = per_token.sum() / total
    datum_loss.backward()
    sums["loss"] += float(datum_loss.detach())
    sums["adv"] += float(adv.sum())
    sums["ratio"] += float(terms.ratio.sum())
    sums["clipped"] += float(terms.clipped.float().sum())


def _check_datum(datum: Datum, loss: LossName) -> None:
    n = len(datum.completion_tokens)
    if datum.old_logprobs and len(datum.old_logprobs) != n:
        raise ValueError(f"old_logprobs has {len(datum.old_logprobs)} entries for {n} tokens")
    if loss == "importance_sampling" and len(datum.advantages) != n:
        raise ValueError(f"importance_sampling needs {n} advantages, got {len(datum.advantages)}")
    if datum.loss_weights is not None and len(datum.loss_weights) != n:
        raise ValueError(f"loss_weights has {len(datum.loss_weights)} entries for {n} tokens")
    if loss == "topk_distill":
        if datum.teacher_topk_ids is None or datum.teacher_topk_logprobs is None:
            raise ValueError("topk_distill needs teacher_topk_ids and teacher_topk_logprobs")
        if len(datum.teacher_topk_ids) != n or len(datum.teacher_topk_logprobs) != n:
            raise ValueError("teacher top-k rows must align with the completion tokens")
