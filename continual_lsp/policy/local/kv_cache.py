"""The KV-cache helpers every local forward pass shares: one copy of each.

transformers' cache argument name, the cache a forward returns, a fresh cache over the
first positions of stored keys and values; the `PromptCache` that keeps the last
prompts' K/V for sampling and scoring; and the training side's prefix cache, keyed by
the weights it was computed under (`TrainState`, `prefix_cache`): a training step
runs its prompt once without gradients (lora_step.py says why).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from continual_lsp.policy.hf_compat import cache_keyword, returned_cache

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens `a` and `b` share from the start."""
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return shared


def model_device(model: Any) -> torch.device:
    return next(model.parameters()).device


def forward(
    model: Any, tokens: list[int], cache: Any, keep: int | torch.Tensor, keyword: str | None = None
) -> tuple[torch.Tensor, Any]:
    """One forward over `tokens` after `cache`; (logits of the last `keep` positions, cache).

    `keyword` (`cache_keyword(model)`) may be passed by a caller that runs many passes.
    """
    ids = torch.tensor([tokens], dtype=torch.long, device=model_device(model))
    out = model(
        input_ids=ids,
        use_cache=True,
        logits_to_keep=keep,
        **{keyword or cache_keyword(model): cache},
    )
    return out.logits[0], returned_cache(out)


def sliced_cache(layers: KV, length: int) -> Any:
    """A fresh DynamicCache holding the first `length` positions of `layers`.

    `DynamicCache.update` concatenates into new tensors, so these slices of the stored
    tensors are never written to: the stored entry stays valid for later use.
    """
    from transformers import DynamicCache

    return DynamicCache(
        ddp_cache_data=[(k[..., :length, :], v[..., :length, :]) for k, v in layers]
    )


def cache_layers(cache: Any) -> KV | None:
    """(keys, values) per layer of a plain DynamicCache; None for caches we cannot slice."""
    layers = getattr(cache, "layers", None)
    if not layers:
        return None
    out = []
    for layer in layers:
        if getattr(layer, "is_sliding", False) or not hasattr(layer, "keys"):
            return None  # a sliding-window layer cannot be cut at an arbitrary length
        out.append((layer.keys, layer.values))
    return out


class PromptCache:
    """The KV caches of the last prompts, reused for the longest prefix the next one shares.

    Every agent turn re-renders the whole conversation, so consecutive prompts share the
    system prompt (~250 tokens) and usually all earlier turns: reusing their keys and
    values saves most of the prefill, the largest cost of a proposal on CPU. Two prompts
    are kept because a retry alternates between two contexts: its candidates are sampled
    from the conversation with the correction, then scored against the denied turn's
    prompt (which, once a routed correction adds a rule near the top, shares little with
    the first). An entry is valid only for the weights it was computed with: `key` (see
    `LocalPolicy.weights_key`) must match, and entries of other weights are dropped.
    Only plain `DynamicCache` layers are reused (sliding-window or recurrent layers
    cannot be cut at an arbitrary prefix); other models simply prefill in full.

    An older entry that shares most of its tokens with the newer one is dropped: the
    newer covers that prefix, and the older would hold a second copy of its K/V to save
    the prefill of a short tail. Two different tasks of one user share the system prompt
    (~250 of ~300 tokens): both kept, a user's cache held ~24 MB where one entry is ~12.
    """

    CAPACITY = 2

    def __init__(self) -> None:
        # (prompt tokens, per-layer keys and values, weights key), newest first.
        self.entries: list[tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]], Any]] = []
        self.hits = 0
        self.reused_tokens = 0

    def clear(self) -> None:
        self.entries = []

    def lookup(self, prompt_tokens: list[int], key: Any) -> tuple[int, Any]:
        """(number of prompt tokens covered, a fresh cache holding them) or (0, None)."""
        best, layers = 0, None
        for tokens, entry_layers, entry_key in self.entries:
            if entry_key != key:
                continue
            shared = common_prefix(tokens, prompt_tokens)
            if shared > best:
                best, layers = shared, entry_layers
        # At least one prompt token must still be fed: its logits predict the first token.
        shared = min(best, len(prompt_tokens) - 1)
        if shared <= 0 or layers is None:
            return 0, None
        self.hits += 1
        self.reused_tokens += shared
        return shared, sliced_cache(layers, shared)

    def covered(self, prompt_tokens: list[int], key: Any) -> tuple[int, KV | None]:
        """(tokens of `prompt_tokens` an entry of `key` holds from the start, its layers),
        the most covered; not counted as a hit."""
        best: tuple[int, KV | None] = (0, None)
        for tokens, layers, entry_key in self.entries:
            if entry_key == key and (shared := common_prefix(tokens, prompt_tokens)) > best[0]:
                best = (shared, layers)
        return best

    def store(self, prompt_tokens: list[int], cache: Any, key: Any) -> None:
        from transformers.cache_utils import DynamicLayer

        layers = getattr(cache, "layers", None)
        if not layers or any(type(layer) is not DynamicLayer for layer in layers):
            self.clear()
            return
        # A copy of the prompt's positions only: the cache handed in runs past them (the
        # call decoded after, a batch row's spare room), and an entry keeping those
        # tensors held 17 MB where the prompt's K/V is 13 (a copy of ~2 ms).
        n = len(prompt_tokens)
        compact = [
            (layer.keys[:, :, :n].clone(), layer.values[:, :, :n].clone()) for layer in layers
        ]
        self.put(prompt_tokens, compact, key)

    def put(self, prompt_tokens: list[int], layers: KV, key: Any) -> None:
        """Keep `layers`, the K/V of `prompt_tokens` exactly (never written to after)."""
        kept = [
            e
            for e in self.entries
            if e[2] == key and 2 * common_prefix(e[0], prompt_tokens) <= len(e[0])
        ]
        self.entries = [(list(prompt_tokens), layers, key), *kept][: self.CAPACITY]


# -- the training side: which weights, and the prefix cache across steps ----------------

TRAINED_ADAPTER = "default"  # peft's name for the adapter LocalPolicy creates
REFERENCE = "reference"  # pseudo adapter name: all adapters disabled (the frozen base)


class LoraHolder(Protocol):
    """What this module trains, saves and loads: `LocalPolicy`, or a toy model in tests.

    `model` is a peft `PeftModel` whose trainable adapter is `TRAINED_ADAPTER`;
    `adapter_version` names the version its weights were last saved as or loaded from.
    """

    model: Any
    adapter_version: str | None
    # Optimizers, step count and the prefix K/V of this holder's weights.
    train_state: TrainState


@dataclass
class _PrefixEntry:
    weights: str  # adapter name the K/V were computed under ("default", "reference", "ema")
    generation: int  # the policy's weight generation at compute time
    tokens: tuple[int, ...]
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values)
    used: float = 0.0


@dataclass
class TrainState:
    """What a policy carries between steps (stored on the policy object).

    `generation` counts changes of the trainable weights (optimizer steps, loads); the
    prefix cache keys student entries by it, so a K/V computed under old weights is never
    reused. Reference entries stay valid forever (the base is frozen) and are kept LRU.
    """

    optimizers: dict[float, torch.optim.Optimizer] = field(default_factory=dict)
    generation: int = 0
    steps: int = 0
    prefix: list[_PrefixEntry] = field(default_factory=list)
    max_reference_entries: int = 2
    max_student_entries: int = 4
    # A training pass's autocast precision (`Settings.train_dtype`); None: the weights'.
    autocast: torch.dtype | None = None
    # Student logits scored under these weights with their autograd graph, by (prompt,
    # completion), for the step that follows (`lora_step.score_for_step`).
    scored: dict[tuple[tuple[int, ...], tuple[int, ...]], torch.Tensor] = field(
        default_factory=dict
    )

    def bump(self, reset_optimizers: bool = False) -> None:
        """The trainable weights changed: drop student K/V and scores; optionally forget
        Adam moments."""
        self.generation += 1
        self.prefix = [e for e in self.prefix if e.weights == REFERENCE]
        self.scored.clear()
        if reset_optimizers:
            # Adam's moments describe the trajectory that led to the old weights; after a
            # load (revert, restart) they would push in a stale direction.
            self.optimizers.clear()


def invalidate_prefix_cache(policy: LoraHolder) -> None:
    """Call after changing the adapter weights by any route other than this module."""
    policy.train_state.bump()


@contextlib.contextmanager
def use_weights(model: Any, weights: str) -> Iterator[None]:
    """Run under one set of weights: the trained adapter, another adapter, or the base.

    `REFERENCE` disables every adapter (peft's `disable_adapter`); another name activates
    that adapter for the block. peft's `set_adapter` flips `requires_grad` to the active
    adapter, so we switch back to the trained adapter on exit, which restores its
    trainability (and leaves the other adapter frozen).
    """
    if weights == TRAINED_ADAPTER:
        yield
    elif weights == REFERENCE:
        with model.disable_adapter():
            yield
    else:
        model.set_adapter(weights)
        try:
            yield
        finally:
            model.set_adapter(TRAINED_ADAPTER)


def prefix_cache(
    policy: LoraHolder, tokens: list[int], weights: str = TRAINED_ADAPTER, *, keep: bool = True
) -> Any:
    """A KV cache holding `tokens` under `weights`, computed without gradients.

    Reuses the longest cached common prefix computed under the same weights (and, for the
    trained adapter, the same weight generation): the student and a `current` teacher
    share the conversation up to the feedback turn; the denied call and the demonstration
    share the whole prompt; the reference shares across steps. Returns a new cache object
    each call (safe to extend), or None when `tokens` is empty. `keep=False`: a prompt no
    later step shares (a rehearsed anchor) is computed but not kept, so it does not evict
    the job's prompt from the few entries kept.
    """
    if not tokens:
        return None
    state = policy.train_state
    model = policy.model
    key = tuple(tokens)
    best: _PrefixEntry | None = None
    best_len = 0
    for entry in state.prefix:
        if entry.weights != weights or (
            weights != REFERENCE and entry.generation != state.generation
        ):
            continue
        n = common_prefix(entry.tokens, key)
        if n > best_len:
            best, best_len = entry, n
    if best is not None and best_len == len(key):
        best.used = time.monotonic()
        return sliced_cache(best.layers, best_len)
    cache = sliced_cache(best.layers, best_len) if best is not None else None
    # Kept K/V are in the weights' precision even inside a bf16-autocast training pass:
    # scoring outside one reads them too.
    precision = torch.autocast(model_device(model).type, enabled=False)
    with torch.no_grad(), precision, use_weights(model, weights):
        _, cache = forward(model, list(key[best_len:]), cache, keep=1)
    layers = cache_layers(cache)
    if layers is None or not keep:
        return cache  # not kept (not sliceable, or not asked): still correct
    state.prefix.append(
        _PrefixEntry(
            weights,
            state.generation,
            key,
            [(k.detach(), v.detach()) for k, v in layers],
            time.monotonic(),
        )
    )
    _evict(state)
    return sliced_cache(layers, len(key))


def warm_prefix(policy: LoraHolder, prompt_tokens: list[int]) -> None:
    """Compute the student's K/V of `prompt_tokens` under the current weights, ahead of use.

    A step changes the weights, so the next step must re-read its whole prompt before it
    trains (most of a 2k-token step on CPU). The worker calls this while the reviewer
    reads the retry: the next correction in the same task has a prompt that extends this
    one (the conversation only grows), so its student and `current`-teacher prefixes
    start from this entry instead of from nothing.
    """
    if len(prompt_tokens) > 1:
        prefix_cache(policy, prompt_tokens[:-1])


def _evict(state: TrainState) -> None:
    for kind, cap in ((REFERENCE, state.max_reference_entries), (None, state.max_student_entries)):
        group = [e for e in state.prefix if (e.weights == REFERENCE) == (kind == REFERENCE)]
        group.sort(key=lambda e: e.used)
        for stale in group[: max(0, len(group) - cap)]:
            state.prefix.remove(stale)
