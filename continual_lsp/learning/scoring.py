"""SDPO's scores: teacher and student logprobs of a call, and the teacher's weights.

Per-token advantages (`learning/sdpo.py`) are `log π_T(y_t | teacher ctx) − log π(y_t |
ctx)`: negative where the teacher (who saw the fix) would not have written that token,
positive where it agrees. Both sides are scored under the decoding grammar's mask
(`grammar_masks`): forced tokens get advantage 0 and decisions are compared among valid
alternatives, as the sampler sees them; the raw gap is mostly about JSON framing, not the
reviewer's point.

Teachers (`settings.teacher`): `current` — the student's own weights (shares the prompt's
KV prefix with the student); `ema` — a second peft adapter `ema` holding an exponential
moving average of the trained adapter (`θ_T ← (1−ρ)θ_T + ρθ`, ρ = teacher_update_rate,
after every step; saved beside each adapter version and restored with it, so a restarted
worker or a revert keeps the teacher of those weights; a version saved without one starts
it from the student's weights, not from zero as TRL's `PEFTAdapterEMACallback` does);
`trust_region` — the current teacher mixed with the frozen reference in probability
space, `q = (1−ρ)·π_T + ρ·π_ref` (both on the teacher context), ρ = `trust_region_rate`
(default `teacher_update_rate`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch

from continual_lsp.policy.base import Policy
from continual_lsp.policy.local import adapter_files, kv_cache, lora_step

if TYPE_CHECKING:
    from continual_lsp.policy.local.local_policy import LocalPolicy

log = logging.getLogger(__name__)

EMA_ADAPTER = "ema"


@dataclass
class TeacherScores:
    logprobs: list[float]  # of each scored token
    topk_ids: list[list[int]] | None = None
    topk_logprobs: list[list[float]] | None = None


def ensure_ema_teacher(policy: LocalPolicy) -> None:
    """Create the `ema` adapter (once per process): the teacher saved with the loaded
    version if there is one (`adapter_files.save_adapter` writes it), else a copy of the
    trained adapter."""
    model = policy.model
    if EMA_ADAPTER in model.peft_config:
        return
    model.add_adapter(EMA_ADAPTER, model.peft_config[kv_cache.TRAINED_ADAPTER])
    # add_adapter may mark the new adapter trainable; set_adapter(default) freezes it again.
    model.set_adapter(kv_cache.TRAINED_ADAPTER)
    state = adapter_files.saved_companion(policy, EMA_ADAPTER) or adapter_files.adapter_state(
        policy
    )
    with torch.no_grad():
        adapter_files.set_adapter_state(policy, state, adapter=EMA_ADAPTER)
    kv_cache.invalidate_prefix_cache(policy)


@torch.no_grad()
def update_ema_teacher(policy: LocalPolicy, rate: float) -> None:
    """θ_ema ← (1 − rate)·θ_ema + rate·θ, tensor by tensor, in place."""
    ensure_ema_teacher(policy)
    student = dict(policy.model.named_parameters())
    for name, param in policy.model.named_parameters():
        if f".{EMA_ADAPTER}." not in name:
            continue
        source = student.get(name.replace(f".{EMA_ADAPTER}.", f".{kv_cache.TRAINED_ADAPTER}."))
        if source is not None:
            param.lerp_(source.detach(), rate)
    kv_cache.invalidate_prefix_cache(policy)


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
        # deferred: llguidance and transformers; only the local backend replays a grammar
        from continual_lsp.policy.local.grammar import allowed_mask

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
    policy: LocalPolicy,
    prompt: list[int],
    tokens: list[int],
    teacher: str,
    trust_region_rate: float,
) -> torch.Tensor:
    """Teacher log-distribution `(T, V)` at each position of `tokens` after `prompt`."""
    weights = EMA_ADAPTER if teacher == "ema" else kv_cache.TRAINED_ADAPTER
    if teacher == "ema":
        ensure_ema_teacher(policy)
    logits = lora_step.completion_logits(policy, prompt, tokens, weights)
    current = torch.log_softmax(logits.float(), -1)
    if teacher != "trust_region" or trust_region_rate <= 0:
        return current
    reference = torch.log_softmax(
        lora_step.completion_logits(policy, prompt, tokens, kv_cache.REFERENCE).float(), -1
    )
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
    if not policy.scores_locally:
        # Scalar logprobs of the current weights only.
        if topk or teacher != "current":
            raise ValueError(f"teacher={teacher!r}, topk={topk} need the local backend")
        return TeacherScores(logprobs=list(policy.logprobs(prompt, tokens)))
    log_probs = _teacher_log_probs(
        cast("LocalPolicy", policy), prompt, tokens, teacher, trust_region_rate
    )
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
    if not policy.scores_locally:
        return list(policy.logprobs(prompt, tokens))
    # Prefix-cached: the KV of `prompt` is reused by the training step that follows.
    logits = lora_step.completion_logits(cast("LocalPolicy", policy), prompt, tokens)
    return pick(renormalise(torch.log_softmax(logits.float(), -1), masks), tokens)


def sampler_logprobs(policy: Policy, prompt: list[int], tokens: list[int]) -> list[float]:
    """Logprobs as the grammar-constrained sampler sees them (what decides a proposal)."""
    return student_logprobs(policy, prompt, tokens, grammar_masks(policy, tokens))
