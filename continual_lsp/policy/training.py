"""LoRA training for the local backend: `train_step`, prefix KV caching, adapter files.

Everything here works on any object with `.model` (a peft `PeftModel` whose trainable
adapter is `"default"`) and `.adapter_version` (`LoraHolder`) — `LocalPolicy`
delegates its `train_step` / `save_adapter` / `load_adapter` here.

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

(`tests/policy/test_training.py::test_prefix_gradient_drop_is_small` re-measures the
short case and requires cos > 0.5.) So the dropped path is large (|g_cached| is 70–75 % of
|g_full|, and the difference vector is 0.6–0.7 of |g_full|), but the kept part is well aligned with the true gradient (positive
inner product: every step still descends the true loss to first order). What is lost is
the adapter learning to re-read the context differently *for this call* (how the prompt
is encoded); what is kept is how the completion attends to and computes from it. We
take that trade because the prompt is 10–40× longer than the call: the gradient pass
then costs about what the call costs (`bench/sdpo_step.py`). `prefix_cache=False`
gives the exact full-backprop gradient.

Adapter files: `save_adapter` writes `<dir>/<name>/adapter_model.safetensors` (+ peft's
`adapter_config.json`) into a hidden `.partial-*` directory, fsyncs, then renames it into
place, so a version directory either exists complete or not at all. `load_adapter`
copies the weights into the live peft model (no base reload) and checks the sha256.

Over 500 lines on purpose: the step, its prefix cache, the optimizers and the adapter
files all share the per-policy `TrainState` (cache generations, optimizer resets on
load), which a split would have to expose.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save_file

from continual_lsp.policy import losses
from continual_lsp.policy.base import AdapterInfo, Datum, LossName, TrainMetrics

ADAPTER_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
PARTIAL_PREFIX = ".partial-"
log = logging.getLogger(__name__)

TRAINED_ADAPTER = "default"  # peft's name for the adapter LocalPolicy creates
REFERENCE = "reference"  # pseudo adapter name: all adapters disabled (the frozen base)


class AdapterIntegrityError(RuntimeError):
    """An adapter file does not match its recorded sha256, or does not fit the model."""


class LoraHolder(Protocol):
    """What this module trains, saves and loads: `LocalPolicy`, or a toy model in tests.

    `model` is a peft `PeftModel` whose trainable adapter is `TRAINED_ADAPTER`;
    `adapter_version` names the version its weights were last saved as or loaded from.
    """

    model: Any
    adapter_version: str | None


# -- per-policy training state ------------------------------------------------------------


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

    def bump(self, reset_optimizers: bool = False) -> None:
        """The trainable weights changed: drop student K/V; optionally forget Adam moments."""
        self.generation += 1
        self.prefix = [e for e in self.prefix if e.weights == REFERENCE]
        if reset_optimizers:
            # Adam's moments describe the trajectory that led to the old weights; after a
            # load (revert, restart) they would push in a stale direction.
            self.optimizers.clear()


_STATE_ATTR = "_continual_lsp_train_state"


def train_state(policy: LoraHolder) -> TrainState:
    state = getattr(policy, _STATE_ATTR, None)
    if state is None:
        state = TrainState()
        setattr(policy, _STATE_ATTR, state)
    return state


def invalidate_prefix_cache(policy: LoraHolder) -> None:
    """Call after changing the adapter weights by any route other than this module."""
    train_state(policy).bump()


# -- weights selection and forward passes ---------------------------------------------------


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


def _cache_keyword(model: Any) -> str:
    """transformers 5.2x renamed the KV-cache argument `past_key_values` to `cache`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(base.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _new_cache(layers: list[tuple[torch.Tensor, torch.Tensor]], length: int) -> Any:
    """A fresh DynamicCache holding the first `length` positions of `layers`.

    Built from (copied) tensors so that extending it never touches the cached entry.
    """
    from transformers import DynamicCache

    return DynamicCache(
        ddp_cache_data=[(k[..., :length, :], v[..., :length, :]) for k, v in layers]
    )


def _cache_layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
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


def _forward(model: Any, tokens: list[int], cache: Any, keep: int) -> tuple[torch.Tensor, Any]:
    """One forward over `tokens` after `cache`; (logits of the last `keep` positions, cache)."""
    ids = torch.tensor([tokens], dtype=torch.long, device=_device(model))
    out = model(
        input_ids=ids, use_cache=True, logits_to_keep=keep, **{_cache_keyword(model): cache}
    )
    new_cache = getattr(out, "cache", None)
    if new_cache is None:
        new_cache = out.past_key_values
    return out.logits[0], new_cache


def prefix_cache(policy: LoraHolder, tokens: list[int], weights: str = TRAINED_ADAPTER) -> Any:
    """A KV cache holding `tokens` under `weights`, computed without gradients.

    Reuses the longest cached common prefix computed under the same weights (and, for the
    trained adapter, the same weight generation): the student and a `current` teacher
    share the conversation up to the feedback turn; the denied call and the demonstration
    share the whole prompt; the reference shares across steps. Returns a new cache object
    each call (safe to extend), or None when `tokens` is empty.
    """
    if not tokens:
        return None
    state = train_state(policy)
    model = policy.model
    key = tuple(tokens)
    best: _PrefixEntry | None = None
    best_len = 0
    for entry in state.prefix:
        if entry.weights != weights or (
            weights != REFERENCE and entry.generation != state.generation
        ):
            continue
        n = _common_prefix(entry.tokens, key)
        if n > best_len:
            best, best_len = entry, n
    if best is not None and best_len == len(key):
        best.used = time.monotonic()
        return _new_cache(best.layers, best_len)
    cache = _new_cache(best.layers, best_len) if best is not None else None
    with torch.no_grad(), use_weights(model, weights):
        _, cache = _forward(model, list(key[best_len:]), cache, keep=1)
    layers = _cache_layers(cache)
    if layers is None:
        return cache  # not sliceable: no reuse, but still correct
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
    return _new_cache(layers, len(key))


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


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _evict(state: TrainState) -> None:
    for kind, cap in ((REFERENCE, state.max_reference_entries), (None, state.max_student_entries)):
        group = [e for e in state.prefix if (e.weights == REFERENCE) == (kind == REFERENCE)]
        group.sort(key=lambda e: e.used)
        for stale in group[: max(0, len(group) - cap)]:
            state.prefix.remove(stale)


def completion_logits(
    policy: LoraHolder,
    prompt_tokens: list[int],
    completion_tokens: list[int],
    weights: str = TRAINED_ADAPTER,
    *,
    grad: bool = False,
    use_prefix_cache: bool = True,
) -> torch.Tensor:
    """Logits `(T, V)` predicting each completion token, under `weights`.

    With the prefix cache, only `[prompt[-1]] + completion[:-1]` runs through the model
    (with gradients when `grad`); without it, the whole sequence runs (full backprop).
    """
    if not prompt_tokens:
        raise ValueError("scoring needs a non-empty prompt")
    model = policy.model
    n = len(completion_tokens)
    grad_ctx = contextlib.nullcontext() if grad else torch.no_grad()
    if not use_prefix_cache:
        with grad_ctx, use_weights(model, weights):
            logits, _ = _forward(model, prompt_tokens + completion_tokens, None, keep=n + 1)
        return logits[:-1]
    cache = prefix_cache(policy, prompt_tokens[:-1], weights)
    with grad_ctx, use_weights(model, weights):
        logits, _ = _forward(model, [prompt_tokens[-1], *completion_tokens[:-1]], cache, keep=n)
    return logits


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
    state = train_state(policy)
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
    skipped when `kl_coef == 0`). Gradients are clipped to `max_grad_norm`. Metrics are
    measured under the pre-step weights: `kl` is the mean per-token KL that entered the
    loss, `mean_ratio`/`clipped_fraction` describe π/π_old.
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
    state = train_state(policy)
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
    mean, with one datum's activations alive at a time.
    """
    n = len(datum.completion_tokens)
    logits = completion_logits(
        policy,
        datum.prompt_tokens,
        datum.completion_tokens,
        grad=True,
        use_prefix_cache=prefix_cache,
    )
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
    if kl_coef > 0:
        prompt, completion = datum.prompt_tokens, datum.completion_tokens
        reference = completion_logits(
            policy, prompt, completion, REFERENCE, use_prefix_cache=prefix_cache
        )
        kl = losses.full_kl(logits, reference)
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


# -- adapter files --------------------------------------------------------------------------


def adapter_state(policy: LoraHolder, adapter: str = TRAINED_ADAPTER) -> dict[str, torch.Tensor]:
    """The adapter's tensors under peft's portable keys (no adapter name), detached copies."""
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(policy.model, adapter_name=adapter)
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}


def set_adapter_state(
    policy: LoraHolder, state: dict[str, torch.Tensor], adapter: str = TRAINED_ADAPTER
) -> None:
    """Copy `state` into the live adapter; every LoRA tensor must be present and fit."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    # Names only: `adapter_state` would clone every tensor (7 MB) to read its keys.
    expected = set(get_peft_model_state_dict(policy.model, adapter_name=adapter))
    missing = expected - set(state)
    unexpected = set(state) - expected
    if missing or unexpected:
        raise AdapterIntegrityError(
            f"adapter does not fit this model: {len(missing)} tensors missing, "
            f"{len(unexpected)} unexpected (e.g. {sorted(missing or unexpected)[:2]})"
        )
    set_peft_model_state_dict(policy.model, state, adapter_name=adapter)


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def save_adapter(policy: LoraHolder, name: str, directory: str | Path) -> AdapterInfo:
    """Write the trained adapter as version `name` under `directory`, atomically.

    The files go to a hidden `.partial-*` sibling first and are fsynced; one `os.replace`
    then publishes the directory, so `directory/name` is complete or absent even if the
    process dies mid-write (leftover partials are removed by `clean_partial`). Versions
    are immutable: an existing `name` is an error.
    """
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"bad adapter name {name!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / name
    if target.exists():
        raise FileExistsError(f"adapter version {target} already exists")
    state = adapter_state(policy)
    tmp = Path(tempfile.mkdtemp(dir=directory, prefix=PARTIAL_PREFIX))
    try:
        save_file(state, str(tmp / ADAPTER_FILE), metadata={"format": "pt"})
        config = policy.model.peft_config[TRAINED_ADAPTER].to_dict()
        (tmp / CONFIG_FILE).write_text(json.dumps(_jsonable(config), indent=1, sort_keys=True))
        # Companion adapters (the EMA teacher) travel with the version, so a restarted
        # worker or a revert gets the teacher that belonged to these weights.
        companions = {a: companion_file(a) for a in _companions(policy)}
        for adapter, file in companions.items():
            save_file(adapter_state(policy, adapter), str(tmp / file), metadata={"format": "pt"})
        for file in (ADAPTER_FILE, CONFIG_FILE, *companions.values()):
            with open(tmp / file, "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(tmp)
        os.replace(tmp, target)
        _fsync_dir(directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return AdapterInfo(name=name, path=str(target), sha256=sha256_file(target / ADAPTER_FILE))


def companion_file(adapter: str) -> str:
    """File name of a companion adapter's weights inside a version directory."""
    return f"{adapter}.safetensors"


def _companions(policy: LoraHolder) -> list[str]:
    """Adapters beside the trained one (the EMA teacher), by peft name."""
    return [a for a in policy.model.peft_config if a != TRAINED_ADAPTER]


def saved_companion(policy: LoraHolder, adapter: str) -> dict[str, torch.Tensor] | None:
    """`adapter`'s weights saved with the version the policy has loaded, if any."""
    version = policy.adapter_version
    directory = getattr(policy, "adapters_dir", None)  # a toy model keeps no versions
    if not version or directory is None:
        return None
    return _read_companion(Path(directory) / version / companion_file(adapter))


def _read_companion(file: Path) -> dict[str, torch.Tensor] | None:
    # A companion is not covered by the version's checksum: an unreadable one is dropped
    # (the teacher restarts from the student), it must not fail the version's load.
    if not file.is_file():
        return None
    try:
        return load_safetensors_bytes(file.read_bytes())
    except Exception as exc:
        log.warning("ignoring unreadable companion adapter %s: %s", file, exc)
        return None


@torch.no_grad()
def _sync_companions(policy: LoraHolder, version_dir: Path | None) -> None:
    """After the trained adapter changed wholesale (load, revert): each companion takes
    the weights saved with that version, else a copy of the trained adapter."""
    for adapter in _companions(policy):
        saved = None
        if version_dir is not None:
            saved = _read_companion(version_dir / companion_file(adapter))
        set_adapter_state(policy, saved or adapter_state(policy), adapter=adapter)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def _adapter_file(path: str | Path) -> Path:
    path = Path(path)
    return path / ADAPTER_FILE if path.is_dir() else path


def load_adapter(policy: LoraHolder, path: str | Path, sha256: str | None = None) -> None:
    """Load adapter weights from a version directory (or its safetensors file) in place.

    The base model is not reloaded: the tensors are copied into the existing LoRA
    modules, so logprobs afterwards equal those of the weights that were saved, bit for
    bit. The bytes are read once, hashed and parsed from memory, so the sha256 check
    covers exactly what is loaded. Resets the optimizer state and the prefix cache.
    """
    file = _adapter_file(path)
    data = file.read_bytes()
    if sha256 is not None:
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise AdapterIntegrityError(f"{file}: sha256 {actual} does not match {sha256}")
    state = load_safetensors_bytes(data)
    with torch.no_grad():
        set_adapter_state(policy, state)
    _sync_companions(policy, file.parent)
    train_state(policy).bump(reset_optimizers=True)
    policy.adapter_version = file.parent.name


def reset_adapter(policy: LoraHolder) -> None:
    """Back to the base model: zero every LoRA B matrix (the adapter's initial state)."""
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name and f".{TRAINED_ADAPTER}." in name:
                param.zero_()
    _sync_companions(policy, None)
    train_state(policy).bump(reset_optimizers=True)
    policy.adapter_version = None


def list_adapters(directory: str | Path, with_sha256: bool = True) -> list[AdapterInfo]:
    """Complete adapter versions under `directory`, oldest first (partials are skipped)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for child in directory.iterdir():
        if child.name.startswith(".") or not (child / ADAPTER_FILE).is_file():
            continue
        sha = sha256_file(child / ADAPTER_FILE) if with_sha256 else ""
        found.append(
            (
                child.stat().st_mtime_ns,
                child.name,
                AdapterInfo(name=child.name, path=str(child), sha256=sha),
            )
        )
    return [info for _, _, info in sorted(found, key=lambda t: (t[0], t[1]))]


def clean_partial(directory: str | Path) -> int:
    """Remove `.partial-*` leftovers of a save that died; returns how many were removed."""
    directory = Path(directory)
    if not directory.is_dir():
        return 0
    removed = 0
    for child in directory.glob(PARTIAL_PREFIX + "*"):
        shutil.rmtree(child, ignore_errors=True)
        removed += 1
    return removed
