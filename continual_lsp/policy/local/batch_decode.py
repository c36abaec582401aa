"""Decoding every user's call together on one shared model (issue 34).

A team server's users used to take turns at the model: each decode step of one user is a
matrix-vector product over all the weights, so eight users in flight were eight passes
over the weights where one would do (p50 time to a proposal x17 at 8 users). Here the
steps of every call in flight run as one batch, as Punica, S-LoRA and vLLM serve many
LoRA adapters at once:

- The shared base weights see all rows in one matmul; each row's own LoRA delta
  (x_i A_i^T B_i^T * scale) is added beside it from that row's adapter, gathered per
  module (`batched_forward`). A row on the zero adapter gets no delta: the base, exactly
  as `LocalPolicy._skip_zero_adapter` decodes it alone.
- Attention stays per row, over the row's own `DynamicCache`, so rows of different
  lengths need no padding of their K/V and a finished row's cache is the one the
  single-call decode would have left (it goes to the user's prompt cache as before).
  Chunks (a sampled token plus what the grammar forces after it) differ in length: the
  linear layers see them padded to the longest, attention and the head only the real
  tokens.
- Each row keeps its own grammar matcher, sampling generator and limits
  (`grammar.next_chunk`), so a row computes the tokens and log-probs it would alone.
- Continuous batching: `DecodeScheduler` is a thread that owns the decode steps of a
  host; a call prefills its prompt in its own thread (prompt caches as before, its
  adapter live), then hands the row over and waits. A row that finishes leaves at once;
  one handed over joins at the next step.

Only Llama-shaped models (the embedded SmolLM2 and its kin) take this path
(`supports_batching`); others decode one call at a time, as before.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from continual_lsp.policy.base import Completion, SampleParams
from continual_lsp.policy.local.decode import CallState, Decoder, completion_text, opened
from continual_lsp.policy.local.grammar import ToolCallGrammar
from continual_lsp.policy.local.kv_cache import PromptCache

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


@dataclass(kw_only=True)
class Row(CallState):
    """One call in flight: its decoding state, and what it decodes under."""

    adapter: Callable[[], Adapter]  # the row's LoRA tensors, looked up at each step
    cache: RowCache  # the row's own K/V (prompt, opening, fed chunks)
    grammar: ToolCallGrammar
    decoder: Decoder  # the prefill's; keeps the prompt's K/V once the row is done
    started: float
    future: Future[Completion] = field(default_factory=Future)

    def finish(self) -> Completion:
        """The call as `constrained_decode` returns it; its prompt's K/V kept in the
        prompt cache (as the decode left it, see `Decoder.keep_prompt`)."""
        self.decoder.cache = self.cache.dynamic()
        self.decoder.keep_prompt()
        return Completion(
            tokens=self.tokens,
            logprobs=self.logprobs,
            text=completion_text(self.grammar, self.tokens, self.eos),
            forced=self.forced,
            seconds=time.perf_counter() - self.started,
        )


def open_row(
    model: Any,
    grammar: ToolCallGrammar,
    prompt_tokens: list[int],
    params: SampleParams,
    adapter: Callable[[], Adapter],
    prompt_cache: PromptCache | None = None,
    weights_key: Any = None,
    *,
    draft: int = 0,
) -> Row:
    """Prefill one call (prompt and the grammar's forced opening, past what the prompt
    cache holds) with the caller's adapter live, and choose its first chunk: the start of
    `constrained_decode`, whose loop the scheduler then runs with other rows."""
    started = time.perf_counter()
    with torch.inference_mode():
        decoder, fields = opened(
            model, grammar, prompt_tokens, params, prompt_cache, weights_key, draft
        )
    row = Row(
        **fields,
        adapter=adapter,
        cache=RowCache(decoder.cache),
        grammar=grammar,
        decoder=decoder,
        started=started,
    )
    row.start(decoder.next_logits)
    return row


class _LoraDelta:
    """The per-row LoRA delta of one step: rows with an adapter, and their tensors."""

    def __init__(self, adapters: list[Adapter]) -> None:
        self.rows = [i for i, a in enumerate(adapters) if a is not None]
        self.adapters = [a for a in adapters if a is not None]
        self.index = torch.tensor(self.rows, dtype=torch.long)
        self.all_rows = len(self.rows) == len(adapters)

    def linear(self, module: Any, x: torch.Tensor) -> torch.Tensor:
        """`module`(x) with each row's own LoRA delta (peft's Linear, row by row)."""
        base = getattr(module, "base_layer", None)
        if base is None:
            return module(x)
        out = base(x)
        if not self.rows:
            return out
        prefix = module.lora_prefix
        a = torch.stack([adapter[prefix + "lora_A.default.weight"] for adapter in self.adapters])
        b = torch.stack([adapter[prefix + "lora_B.default.weight"] for adapter in self.adapters])
        scale = module.scaling["default"]
        rows = x if self.all_rows else x.index_select(0, self.index)
        delta = torch.bmm(torch.bmm(rows.to(a.dtype), a.transpose(1, 2)), b.transpose(1, 2))
        if self.all_rows:
            return (out + delta * scale).to(out.dtype)
        out = out.clone()
        out[self.index] = (out[self.index] + delta * scale).to(out.dtype)
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
    model: Any, chunks: list[list[int]], caches: list[RowCache], adapters: list[Adapter]
) -> list[torch.Tensor]:
    """One decode step for every row: row i feeds `chunks[i]` after `caches[i]` (which
    grows by it) under `adapters[i]`; returns each row's float logits, one per fed token.
    """
    base = model.get_base_model()
    inner = base.model
    config = base.config
    device = inner.embed_tokens.weight.device
    lengths = [len(c) for c in chunks]
    width = max(lengths)
    ids = torch.zeros(len(chunks), width, dtype=torch.long)
    positions = torch.zeros(len(chunks), width, dtype=torch.long)
    for i, chunk in enumerate(chunks):
        ids[i, : len(chunk)] = torch.tensor(chunk, dtype=torch.long)
        start = caches[i].length
        # Padding continues the row's positions; its outputs are never read.
        positions[i] = torch.arange(start, start + width)
    ids, positions = ids.to(device), positions.to(device)
    lora = _LoraDelta(adapters)
    hidden = inner.embed_tokens(ids)
    cos, sin = inner.rotary_emb(hidden, positions)
    for layer in inner.layers[: config.num_hidden_layers]:
        residual = hidden
        hidden = layer.input_layernorm(hidden)
        hidden = residual + _attention(layer.self_attn, hidden, cos, sin, caches, lengths, lora)
        residual = hidden
        hidden = layer.post_attention_layernorm(hidden)
        mlp = layer.mlp
        gated = mlp.act_fn(lora.linear(mlp.gate_proj, hidden)) * lora.linear(mlp.up_proj, hidden)
        hidden = residual + lora.linear(mlp.down_proj, gated)
    for cache, n in zip(caches, lengths, strict=True):
        cache.advance(n)
    hidden = inner.norm(hidden)
    # The head once for every real token of every row: per row, it read its 28 M weights
    # once a row (measured: half of an 8-row step).
    real = torch.cat([hidden[i, :n] for i, n in enumerate(lengths)])
    return list(base.lm_head(real).float().split(lengths))


def _attention(
    attn: Any,
    hidden: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    caches: list[Any],
    lengths: list[int],
    lora: _LoraDelta,
) -> torch.Tensor:
    """LlamaAttention.forward over ragged rows: projections batched, each row's attention
    over its own cache and only its real tokens (padding never enters a cache)."""
    rows, width = hidden.shape[:2]
    shape = (rows, width, -1, attn.head_dim)
    query = lora.linear(attn.q_proj, hidden).view(shape).transpose(1, 2)
    key = lora.linear(attn.k_proj, hidden).view(shape).transpose(1, 2)
    value = lora.linear(attn.v_proj, hidden).view(shape).transpose(1, 2)
    query, key = apply_rotary_pos_emb(query, key, cos, sin)
    out = torch.zeros_like(query)
    for i, n in enumerate(lengths):
        keys, values = caches[i].update(
            key[i : i + 1, :, :n], value[i : i + 1, :, :n], attn.layer_idx
        )
        mask = None
        if n > 1:  # a chunk: causal within itself, the whole cache before it
            past = keys.shape[2] - n
            mask = torch.ones(n, past + n, dtype=torch.bool, device=keys.device)
            mask[:, past:] = torch.ones(n, n, dtype=torch.bool, device=keys.device).tril()
        out[i : i + 1, :, :n] = torch.nn.functional.scaled_dot_product_attention(
            query[i : i + 1, :, :n],
            keys,
            values,
            attn_mask=mask,
            scale=attn.scaling,
            enable_gqa=attn.num_key_value_groups > 1,
        )
    merged = out.transpose(1, 2).reshape(rows, width, -1)
    return lora.linear(attn.o_proj, merged)


def step_rows(model: Any, rows: list[Row]) -> list[Row]:
    """Feed every row's pending chunk and its draft in one pass, record what each keeps,
    and choose its next chunk; returns the rows that have finished (nothing pending)."""
    with torch.inference_mode():
        logits = batched_forward(
            model, [r.fed() for r in rows], [r.cache for r in rows], [r.adapter() for r in rows]
        )
        for row, fed in zip(rows, logits, strict=True):
            row.cache.drop(row.take(fed))
    return [r for r in rows if not r.pending]


class DecodeScheduler:
    """The thread that steps every call in flight on one host, one batch per step.

    `hold` is the host's model lock, taken for each step (prefills, scoring and training
    take it between steps); `yield_to` says whether other threads wait for it, in which
    case the scheduler lets them in before its next step (a Python lock is not fair).
    `after` runs for each finished row, still under the lock (the host's prompt-cache
    bound)."""

    def __init__(
        self,
        model: Any,
        hold: Callable[[], contextlib.AbstractContextManager[Any]],
        yield_to: Callable[[], bool],
        after: Callable[[Row], None],
    ) -> None:
        self.model = model
        self._hold = hold
        self._yield_to = yield_to
        self._after = after
        self._incoming: list[Row] = []
        self._active: list[Row] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self.steps = 0  # batched steps so far (tests, the bench)
        self.max_rows = 0  # the widest step so far

    def submit(self, row: Row) -> Future[Completion]:
        with self._wake:
            self._incoming.append(row)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="continual-lsp-decode", daemon=True
                )
                self._thread.start()
            self._wake.notify()
        return row.future

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._incoming and not self._active:
                    self._wake.wait()
                self._active += self._incoming
                self._incoming = []
            while self._yield_to():
                time.sleep(0.0005)
            rows = self._active
            try:
                with self._hold():
                    done = step_rows(self.model, rows)
                    self.steps += 1
                    self.max_rows = max(self.max_rows, len(rows))
                    results = [(row, row.finish()) for row in done]
                    for row in done:
                        self._after(row)
            except BaseException as exc:  # every waiting call hears of it; none hangs
                self._active = []
                for row in rows:
                    if not row.future.done():
                        row.future.set_exception(exc)
                continue
            finished = {id(r) for r in done}
            self._active = [r for r in rows if id(r) not in finished]
            for row, completion in results:
                row.future.set_result(completion)
