"""The local backend's `LogitScorer`: what SDPO reads from weights held in this process.

Full log-distributions under the trained adapter, the EMA teacher or the frozen
reference (`lora_step.completion_logits`, prefix-cached); the decoding grammar's
allowed-token masks replayed over a call; the EMA teacher's adapter; the training
prefix cache warmed ahead of the next step (`kv_cache.warm_prefix`).

The EMA teacher is a second peft adapter `ema` holding an exponential moving average of
the trained adapter (`θ_T ← (1−ρ)θ_T + ρθ` after every step). It is saved beside each
adapter version and restored with it (`adapter_files`), so a restarted worker or a
revert keeps the teacher of those weights; a version saved without one starts it from
the student's weights, not from zero as TRL's `PEFTAdapterEMACallback` does.
"""

from __future__ import annotations

import logging

import torch

from continual_lsp.policy.base import Weights
from continual_lsp.policy.local import adapter_files, kv_cache, lora_step
from continual_lsp.policy.local.grammar import ToolCallGrammar, allowed_mask
from continual_lsp.policy.local.kv_cache import LoraHolder

log = logging.getLogger(__name__)

EMA_ADAPTER = "ema"

_ADAPTERS: dict[Weights, str] = {
    "trained": kv_cache.TRAINED_ADAPTER,
    "ema": EMA_ADAPTER,
    "reference": kv_cache.REFERENCE,
}


def ensure_ema_teacher(policy: LoraHolder) -> None:
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
def update_ema_teacher(policy: LoraHolder, rate: float) -> None:
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


def replay_grammar(
    policy: LoraHolder, grammar: ToolCallGrammar, tokens: list[int]
) -> list[torch.Tensor | None]:
    """`grammar`'s allowed-token mask at each position of `tokens` (fast-forward tokens
    count as forced: one-hot masks); None past the point where the grammar stopped or
    rejected a token, or everywhere if the replay fails."""
    if not tokens:
        return []
    try:
        vocab = int(policy.model.get_output_embeddings().weight.shape[0])
        matcher = grammar.matcher()
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


class LocalLogitScorer:
    """Implements `policy.base.LogitScorer` on a peft model in this process."""

    def __init__(self, policy: LoraHolder, grammar: ToolCallGrammar) -> None:
        self.policy = policy
        self.grammar = grammar  # every tool and done: what the sampler decodes under

    def log_distributions(
        self,
        prompt_tokens: list[int],
        completion_tokens: list[int],
        weights: Weights = "trained",
        *,
        for_step: bool = False,
    ) -> torch.Tensor:
        if weights == "ema":
            ensure_ema_teacher(self.policy)
        if for_step and weights == "trained":
            logits = lora_step.score_for_step(self.policy, prompt_tokens, completion_tokens)
        else:
            logits = lora_step.completion_logits(
                self.policy, prompt_tokens, completion_tokens, _ADAPTERS[weights]
            )
        return torch.log_softmax(logits.float(), -1)

    def grammar_masks(self, tokens: list[int]) -> list[torch.Tensor | None]:
        return replay_grammar(self.policy, self.grammar, tokens)

    def update_ema_teacher(self, rate: float) -> None:
        update_ema_teacher(self.policy, rate)

    def warm_prefix(self, prompt_tokens: list[int]) -> None:
        kv_cache.warm_prefix(self.policy, prompt_tokens)
