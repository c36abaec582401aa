"""One model pass for every user's call in flight on a shared model (issue 34).

Each user's decode step alone is a matrix-vector product over all the weights: eight
users were eight passes where one would do. Here the rows of one step (each user's fed
tokens: a chunk and its draft, or a piece of its prompt) are packed one after another
into one sequence, as Punica, S-LoRA and vLLM serve many LoRA adapters at once:

- The shared base weights see every real token in one matmul; each row's own LoRA delta
  (x_i A_i^T B_i^T * scale) is added beside it from that row's adapter, gathered per
  module (`_LoraDelta`). A row on the zero adapter gets no delta: the base, exactly as
  `LocalPolicy._skip_zero_adapter` decodes it alone.
- Attention stays per row, over the row's own K/V (`RowCache`), so rows of different
  lengths need no padding and a finished row's cache is the one the single-call decode
  would have left.

Only Llama-shaped models (the embedded SmolLM2 and its kin) take this path
(`supports_batching`); others decode one call at a time.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

# An adapter as a policy's slot holds it: LoRA parameter name -> tensor; None = zero.
Adapter = dict[str, torch.Tensor] | None


def supports_batching(model: Any) -> bool:
    """The model is a Llama-style decoder whose layers `batched_forward` knows."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(base, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(base, "lm_head") or not hasattr(inner, "rotary_emb"):
        return False
    config = base.config
    return bool(
        getattr(config, "model_type", "") in ("llama", "smollm3", "mistral", "qwen2")
        and not getattr(config, "attention_bias", False)
        and getattr(config, "sliding_window", None) is None
        and all(hasattr(layer, "self_attn") and hasattr(layer, "mlp") for layer in layers)
    )


class RowCache:
    """One row's K/V, per layer, in buffers with room to grow: a step writes its keys in
    place. `DynamicCache.update` concatenates instead, copying the whole cache at every
    step of every layer (measured: a sixth of an 8-row step's CPU time)."""

    def __init__(self, cache: Any, room: int = 64) -> None:
        self.length = cache.get_seq_length()
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        for layer in cache.layers:
            self.keys.append(self._grown(layer.keys, room))
            self.values.append(self._grown(layer.values, room))

    @classmethod
    def empty(cls, model: Any, room: int) -> RowCache:
        """No K/V yet (a prompt the prompt cache did not hold), room for `room` tokens."""
        from transformers import DynamicCache

        config = model.get_base_model().config
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        weight = model.get_base_model().model.embed_tokens.weight
        nothing = weight.new_empty(1, heads, 0, dim)
        return cls(
            DynamicCache(ddp_cache_data=[(nothing, nothing)] * config.num_hidden_layers), room
        )

    def _grown(self, tensor: torch.Tensor, room: int) -> torch.Tensor:
        shape = (*tensor.shape[:2], self.length + room, tensor.shape[3])
        buffer = tensor.new_empty(shape)
        buffer[:, :, : self.length] = tensor[:, :, : self.length]
        return buffer

    def update(
        self, key: torch.Tensor, value: torch.Tensor, layer: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append `key` / `value` (1, heads, n, dim) to `layer`; the layer's K/V so far.
        The length moves on at `advance`, once every layer has its keys."""
        end = self.length + key.shape[2]
        if end > self.keys[layer].shape[2]:  # doubled: amortised, rarely reached
            self.keys[layer] = self._grown(self.keys[layer], end)
            self.values[layer] = self._grown(self.values[layer], end)
        self.keys[layer][:, :, self.length : end] = key
        self.values[layer][:, :, self.length : end] = value
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def advance(self, fed: int) -> None:
        self.length += fed

    def drop(self, count: int) -> None:
        """Forget the last `count` positions (a draft's rejected tail): the next step
        writes over them."""
        self.length -= count

    def dynamic(self) -> Any:
        """A `DynamicCache` over this K/V (views), as a prompt cache stores one."""
        from transformers import DynamicCache

        data = [
            (k[:, :, : self.length], v[:, :, : self.length])
            for k, v in zip(self.keys, self.values, strict=True)
        ]
        return DynamicCache(ddp_cache_data=data)


class _LoraDelta:
    """The per-row LoRA delta of one step over packed tokens (every row's fed tokens one
    after another, no padding): rows with an adapter, and where their tokens sit."""

    def __init__(self, adapters: list[Adapter], starts: list[int], lengths: list[int]) -> None:
        self.adapters = [a for a in adapters if a is not None]
        rows = [i for i, a in enumerate(adapters) if a is not None]
        self.width = max((lengths[i] for i in rows), default=0)
        # Packed position of each adapter row's token, and its place in a (rows, width)
        # block: bmm needs rows of one length, so the (rank-16) delta runs padded while
        # the base weights see only real tokens.
        self.tokens = torch.tensor(
            [starts[i] + t for i in rows for t in range(lengths[i])], dtype=torch.long
        )
        self.slots = torch.tensor(
            [k * self.width + t for k, i in enumerate(rows) for t in range(lengths[i])],
            dtype=torch.long,
        )
        self.everything = len(rows) == len(adapters) and all(lengths[i] == self.width for i in rows)

    def linear(self, module: Any, x: torch.Tensor) -> torch.Tensor:
        """`module`(x) with each row's own LoRA delta (peft's Linear, row by row); `x` is
        (1, packed tokens, features)."""
        base = getattr(module, "base_layer", None)
        if base is None:
            return module(x)
        out = base(x)
        if not self.adapters:
            return out
        prefix = module.lora_prefix
        a = torch.stack([adapter[prefix + "lora_A.default.weight"] for adapter in self.adapters])
        b = torch.stack([adapter[prefix + "lora_B.default.weight"] for adapter in self.adapters])
        scale = module.scaling["default"]
        flat = x[0].to(a.dtype)
        if self.everything:
            block = flat.view(len(self.adapters), self.width, -1)
        else:
            block = flat.new_zeros(len(self.adapters) * self.width, flat.shape[-1])
            block[self.slots] = flat[self.tokens]
            block = block.view(len(self.adapters), self.width, -1)
        delta = torch.bmm(torch.bmm(block, a.transpose(1, 2)), b.transpose(1, 2)) * scale
        delta = delta.view(-1, delta.shape[-1])
        if self.everything:
            return (out + delta[None]).to(out.dtype)
        out = out.clone()
        out[0, self.tokens] = (out[0, self.tokens] + delta[self.slots]).to(out.dtype)
        return out


def column_major(model: Any) -> int:
    """Store every float32 CPU linear weight of `model` transposed in memory (the same
    values, the same shape, other strides); returns how many.

    MKL's sgemm packs a row-major weight at every call when several rows multiply it, so
    on the build machine an 8-row product over a 1536 x 576 weight took 2.9x one row's
    time, and 1.3x with the weight stored column-major (the head: 3.5x and 2.4x); one
    row, and a 300-token prefill, were as fast or faster (bench numbers in the commit).
    A tied head and embedding take it too: a token's embedding is then a strided read,
    a few microseconds a token."""
    changed = 0
    with torch.no_grad():
        for name, module in model.named_modules():
            weight = getattr(module, "weight", None)
            if (
                isinstance(module, torch.nn.Linear)
                and "lora_" not in name  # adapters are swapped per user, never re-laid
                and weight is not None
                and weight.dtype == torch.float32
                and weight.device.type == "cpu"
                and weight.is_contiguous()
                and min(weight.shape) > 1
            ):
                weight.data = weight.data.t().contiguous().t()
                changed += 1
    return changed


def name_lora_modules(model: Any) -> None:
    """Give each LoRA-wrapped module the prefix of its parameters' names (as a slot's
    adapter dict is keyed), once per model."""
    for name, module in model.named_modules():
        if hasattr(module, "base_layer") and hasattr(module, "lora_A"):
            module.lora_prefix = name + "."


def batched_forward(
    model: Any,
    chunks: list[list[int]],
    caches: list[RowCache],
    adapters: list[Adapter],
    keep: list[int] | None = None,
) -> list[torch.Tensor]:
    """One decode step for every row: row i feeds `chunks[i]` after `caches[i]` (which
    grows by it) under `adapters[i]`; returns each row's float logits for its last
    `keep[i]` fed tokens (default: every fed token).

    The rows' tokens are packed into one sequence, not padded to the longest chunk: a
    step where one row fed a 4-token draft and seven fed one token cost twice the
    one-token step padded (32 token rows through every weight instead of 11).
    """
    base = model.get_base_model()
    inner = base.model
    config = base.config
    device = inner.embed_tokens.weight.device
    lengths = [len(c) for c in chunks]
    ids = torch.tensor([[t for chunk in chunks for t in chunk]], dtype=torch.long, device=device)
    positions = torch.cat(
        [torch.arange(c.length, c.length + n) for c, n in zip(caches, lengths, strict=True)]
    )[None].to(device)
    starts = [0, *itertools.accumulate(lengths)][:-1]  # each row's first packed token
    lora = _LoraDelta(adapters, starts, lengths)
    hidden = inner.embed_tokens(ids)
    cos, sin = inner.rotary_emb(hidden, positions)
    for layer in inner.layers[: config.num_hidden_layers]:
        residual = hidden
        hidden = layer.input_layernorm(hidden)
        hidden = residual + _attention(
            layer.self_attn, hidden, cos, sin, caches, starts, lengths, lora
        )
        residual = hidden
        hidden = layer.post_attention_layernorm(hidden)
        mlp = layer.mlp
        gated = mlp.act_fn(lora.linear(mlp.gate_proj, hidden)) * lora.linear(mlp.up_proj, hidden)
        hidden = residual + lora.linear(mlp.down_proj, gated)
    for cache, n in zip(caches, lengths, strict=True):
        cache.advance(n)
    # The head once for every kept token of every row: per row, it read its 28 M weights
    # once a row (measured: half of an 8-row step). A prefill keeps only its last rows.
    keep = lengths if keep is None else keep
    kept = torch.tensor(
        [t for s, n, k in zip(starts, lengths, keep, strict=True) for t in range(s + n - k, s + n)],
        dtype=torch.long,
    )
    return list(base.lm_head(inner.norm(hidden[0, kept.to(device)])).float().split(keep))


def _attention(
    attn: Any,
    hidden: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    caches: list[Any],
    starts: list[int],
    lengths: list[int],
    lora: _LoraDelta,
) -> torch.Tensor:
    """LlamaAttention.forward over packed rows: projections for every token at once,
    each row's attention over its own cache and its own tokens."""
    shape = (1, hidden.shape[1], -1, attn.head_dim)
    query = lora.linear(attn.q_proj, hidden).view(shape).transpose(1, 2)
    key = lora.linear(attn.k_proj, hidden).view(shape).transpose(1, 2)
    value = lora.linear(attn.v_proj, hidden).view(shape).transpose(1, 2)
    query, key = apply_rotary_pos_emb(query, key, cos, sin)
    out = torch.empty_like(query)
    for cache, start, n in zip(caches, starts, lengths, strict=True):
        end = start + n
        keys, values = cache.update(key[:, :, start:end], value[:, :, start:end], attn.layer_idx)
        mask = None
        if n > 1:  # a chunk: causal within itself, the whole cache before it
            past = keys.shape[2] - n
            mask = torch.ones(n, past + n, dtype=torch.bool, device=keys.device)
            mask[:, past:] = torch.ones(n, n, dtype=torch.bool, device=keys.device).tril()
        out[:, :, start:end] = torch.nn.functional.scaled_dot_product_attention(
            query[:, :, start:end],
            keys,
            values,
            attn_mask=mask,
            scale=attn.scaling,
            enable_gqa=attn.num_key_value_groups > 1,
        )
    merged = out.transpose(1, 2).reshape(1, hidden.shape[1], -1)
    return lora.linear(attn.o_proj, merged)
