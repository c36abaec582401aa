"""One loaded base model per process, shared by every local policy that names the same
model files (issue 20).

A TCP server holds one Agent per (user, workspace), and each Agent one `LocalPolicy`.
Loading the model once per policy costs a full copy of the weights per user (~540 MB for
the embedded 135M model in float32); a LoRA adapter is ~7 MB. So the policies of a
process share a `ModelHost`: one base model wrapped in one set of LoRA modules, into
which each policy's adapter weights are copied when it runs (an `AdapterSlot` per
policy). A copy is ~2 ms; a second model is seconds to load and half a gigabyte.

Why copy weights in rather than peft's named multi-adapter: the training and adapter-file
code (lora_step.py, adapter_files.py) is written against one trainable adapter named `default`, and a
policy's `.model` must look the same shared or not. A copy also keeps the LoRA modules
at one adapter's size however many users there are.

Rules that keep users apart:
- Every use of the model runs inside `serving(slot)`: the host's lock, held for the whole
  call, with that slot's weights live. One user's decode never sees another's adapter.
- While a slot is live its weights exist only in the LoRA modules: its own copy is
  dropped when they go in and taken again when another slot's go in (a ~7 MB clone,
  ~1 ms), so an adapter is never held twice. Changes a policy makes to its weights (a
  train step, a loaded version, or a test writing through `.data`) are noticed by a
  fingerprint of the live LoRA tensors (their version counters and checksum) and bump
  the slot's `generation`, which keys its prompt caches.
- At most `max_resident` slots keep their weights in memory, the live one included; the
  least recently used beyond that are written to a spill file (safetensors, the host's
  temporary directory) and read back on their next use, bit for bit.
- Prompt K/V caches (one `PromptCache` per policy, ~45 KB a token) are bounded across the
  host by count and by bytes: while more than `max_prompt_caches` hold entries, or they
  hold more than `max_prompt_cache_mb` together, the least recently used is cleared. A
  count alone does not bound memory: a cache grows with its conversation.

Decoding together (issue 34): a shared host's `scheduler` (batch_decode.py) steps the
decodes of every user in flight as one batch, each row with its own adapter: a call opens
its row under `serving(slot)` (its prompt-cache lookup), prefills the rest of its prompt
in the batch's steps and decodes there. Its slot is pinned (`pin`): kept in memory, never
spilled, until its row is done, since every step reads its tensors (`adapter_of`).
Its weights are whichever tensors hold them at that step: the model's LoRA parameters
while the slot is live, its `state` otherwise.

Companion adapters (the EMA teacher) are added to the model by in-process training; they
are not swapped, so a host shared by several users must not train in process. The
server does not: its training runs in the worker process, on a private host.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import itertools
import tempfile
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from pydantic import BaseModel, ConfigDict
from safetensors.torch import load_file, save_file

from continual_lsp.config import Settings
from continual_lsp.policy.hf_lock import LOAD_LOCK
from continual_lsp.policy.local.batch_decode import DecodeScheduler, Row
from continual_lsp.policy.local.batch_forward import (
    column_major,
    name_lora_modules,
    supports_batching,
)
from continual_lsp.policy.local.grammar import ToolCallGrammar
from continual_lsp.policy.local.kv_cache import PromptCache
from continual_lsp.policy.model_files import load_model_and_tokenizer

TRAINED = ".default."  # peft's name for the one trainable adapter, as it appears in names
MB = 1 << 20


class HostKey(BaseModel):
    """What makes two policies' models interchangeable: the same files, starter, LoRA
    shape and precision. A policy whose key differs gets a host of its own."""

    model_config = ConfigDict(frozen=True)

    model: str
    device: str
    starter: bool
    lora_rank: int
    lora_targets: tuple[str, ...]
    dtype: str

    @classmethod
    def of(cls, settings: Settings, dtype: str) -> HostKey:
        return cls(
            model=settings.model,
            device=settings.device,
            starter=settings.starter,
            lora_rank=settings.lora_rank,
            lora_targets=tuple(settings.lora_targets),
            dtype=dtype,
        )


class AdapterSlot:
    """One policy's LoRA weights, held here while another policy's weights are live."""

    _ids = itertools.count(1)

    def __init__(self, owner: str, state: dict[str, torch.Tensor]) -> None:
        self.id = next(self._ids)
        self.owner = owner
        # None while spilled to disk, and while live with weights of its own: those are
        # the model's LoRA tensors then. Fresh slots share the host's initial tensors:
        # they are only ever replaced, never written in place.
        self.state: dict[str, torch.Tensor] | None = state
        self.spill: Path | None = None
        self.generation = 0  # bumped on every change of this slot's weights
        self.fingerprint: Any = None  # of the live tensors when last checked
        self.synced: Any = None  # of the live tensors when `state` was last equal to them
        self.used = 0
        self.pins = 0  # rows in flight on this slot's weights: never spilled meanwhile


class ModelHost:
    def __init__(self, base: Any, tokenizer: Any, settings: Settings) -> None:
        self.tokenizer = tokenizer
        config = LoraConfig(
            r=settings.lora_rank,
            lora_alpha=2 * settings.lora_rank,
            target_modules=list(settings.lora_targets),
            lora_dropout=0.0,
            task_type="CAUSAL_LM",
        )
        with warnings.catch_warnings():
            # peft 0.21 calls a transformers 5 deprecated property; the warning is noise.
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
            self.model: PeftModel = get_peft_model(base, config)
        self.model.eval()
        self.grammar = ToolCallGrammar(tokenizer)  # every tool and done; shared by every policy
        # Newest last; a workspace's file list is part of the key, so every created file
        # makes a new grammar: the oldest are dropped past MAX_GRAMMARS.
        self.grammars: OrderedDict[tuple[tuple[str, ...], str], ToolCallGrammar] = OrderedDict()
        self.grammars_lock = threading.Lock()  # not `lock`: that one is held while decoding
        self.max_resident = settings.max_resident_adapters
        self.max_prompt_caches = settings.max_prompt_caches
        self.max_prompt_cache_bytes = int(settings.max_prompt_cache_mb * MB)
        self.batch_prefill_tokens = settings.batch_prefill_tokens
        self.prompt_cache_bytes = 0  # held by the caches after the last `note_cache`
        self.lock = threading.RLock()
        self._waiting = 0  # threads waiting for `lock` (the scheduler lets them in first)
        self._waiters: set[int] = set()
        self._unpinned = threading.Condition(self.lock)
        self._waiting_lock = threading.Lock()
        self.scheduler: DecodeScheduler | None = None  # `enable_batching`
        self._initial = self._initial_state()
        self._slots: weakref.WeakSet[AdapterSlot] = weakref.WeakSet()
        self._live: AdapterSlot | None = None
        self._clock = itertools.count(1)
        self._caches: OrderedDict[int, weakref.ref[PromptCache]] = OrderedDict()
        self._spill_dir: tempfile.TemporaryDirectory[str] | None = None
        self.spills = 0  # slots written to disk so far (for tests and the bench)
        self.reloads = 0
        self.swap_s = 0.0  # seconds spent writing and reading spilled slots
        self.load_seconds: dict[str, float] = {}  # `load`'s parts

    @classmethod
    def load(cls, settings: Settings, dtype: str = "float32") -> ModelHost:
        started = time.perf_counter()
        base, tokenizer = load_model_and_tokenizer(
            settings.model, settings.device, starter=settings.starter, dtype=dtype
        )
        loaded = time.perf_counter()
        host = cls(base, tokenizer, settings)
        release_freed_memory()  # the load's temporaries (GGUF dequantisation, starter merge)
        # A fresh server's wait, by part (issue 34; the server logs it, bench/team.py reads it)
        host.load_seconds = {
            "weights": round(loaded - started, 2),
            "adapter_and_grammar": round(time.perf_counter() - loaded, 2),
        }
        return host

    def enable_batching(self) -> bool:
        """Decode the calls of every policy on this host together (batch_decode.py);
        False (and nothing changes) for a model `batched_forward` does not know."""
        if self.scheduler is None and supports_batching(self.model):
            name_lora_modules(self.model)
            column_major(self.model)
            release_freed_memory()  # the row-major copies, freed a weight at a time
            self.scheduler = DecodeScheduler(
                self.model,
                lambda: self.lock,
                lambda: self._waiting > 0,
                self._row_done,
                self.batch_prefill_tokens,
            )
        return self.scheduler is not None

    def _row_done(self, row: Row) -> None:
        cache = row.prompt_cache
        if cache is not None:
            self.note_cache(cache)

    def holds_lock(self) -> bool:
        """This thread holds the model (inside `serving`): it must not wait for the
        scheduler, which needs the model too."""
        return bool(self.lock._is_owned())  # type: ignore[attr-defined]

    @classmethod
    def private(cls, settings: Settings, model_and_tokenizer: tuple[Any, Any]) -> ModelHost:
        """A host for one caller-supplied model (the tests' session fixture). Copied first:
        get_peft_model injects LoRA layers into the module in place, which would change it
        for every other user of that object; 135M parameters copy in well under a second."""
        base, tokenizer = model_and_tokenizer
        return cls(copy.deepcopy(base).to(settings.device), tokenizer, settings)

    # -- slots ------------------------------------------------------------------------------

    def slot(self, owner: str) -> AdapterSlot:
        """A new slot at the fresh (zero) adapter, for one policy."""
        slot = AdapterSlot(owner, self._initial)
        with self.lock:
            self._slots.add(slot)
        return slot

    @property
    def resident(self) -> int:
        """Slots holding weights of their own in memory (fresh ones share the initial)."""
        return sum(1 for s in list(self._slots) if self._holds_own(s))

    def _holds_own(self, slot: AdapterSlot) -> bool:
        """`slot` keeps trained weights in memory: live in the model, or in its `state`
        (not spilled, not the shared initial)."""
        if slot is self._live:
            return slot.state is not self._initial
        return slot.state is not None and slot.state is not self._initial

    @contextlib.contextmanager
    def serving(self, slot: AdapterSlot) -> Iterator[None]:
        """Hold the model with `slot`'s weights live, for one call (reentrant)."""
        self._note_waiting(True)
        try:
            with self.lock:
                self._note_waiting(False)
                # A row of this slot in flight decodes on its weights: a change (a landed
                # step, a loaded version) waits for it, so a call never mixes two versions.
                while slot.pins:
                    self._unpinned.wait()
                self._make_live(slot)
                slot.used = next(self._clock)
                yield
        except BaseException:
            self._note_waiting(False)  # in case the wait itself failed
            raise

    def _note_waiting(self, waiting: bool) -> None:
        """Count this thread in or out of those waiting for the lock."""
        with self._waiting_lock:
            mine = threading.get_ident()
            if waiting:
                self._waiters.add(mine)
            else:
                self._waiters.discard(mine)
            self._waiting = len(self._waiters)

    def pin(self, slot: AdapterSlot, pinned: bool) -> None:
        """Keep `slot`'s weights in memory while a row decodes on them (`pinned`), or
        release one such hold."""
        with self.lock:
            slot.pins += 1 if pinned else -1
            if not pinned:
                self._unpinned.notify_all()
                self._evict()

    def adapter_of(self, slot: AdapterSlot) -> dict[str, torch.Tensor]:
        """`slot`'s LoRA tensors by parameter name, wherever they are now (under the
        lock): the model's while it is live, else its own, read back if spilled."""
        if slot is self._live:
            return dict(self._lora_params())
        return self._read_back(slot)

    def _read_back(self, slot: AdapterSlot) -> dict[str, torch.Tensor]:
        """`slot`'s own tensors, read back from its spill file if it was spilled."""
        if slot.state is None:
            assert slot.spill is not None
            started = time.perf_counter()
            slot.state = load_file(str(slot.spill))
            slot.spill.unlink(missing_ok=True)
            slot.spill = None
            self.reloads += 1
            self.swap_s += time.perf_counter() - started
        return slot.state

    def _make_live(self, slot: AdapterSlot) -> None:
        live = self._live
        if live is slot:
            self._notice_changes(slot)
            return
        if live is not None:
            self._write_back(live)
        self._restore(slot)
        self._live = slot
        slot.fingerprint = slot.synced = self._fingerprint()
        self._evict()

    def _notice_changes(self, slot: AdapterSlot) -> None:
        """Bump `slot.generation` if the live weights changed since `slot.fingerprint`."""
        now = self._fingerprint()
        if now != slot.fingerprint:
            slot.fingerprint = now
            slot.generation += 1

    def _write_back(self, slot: AdapterSlot) -> None:
        """Hand the live tensors to `slot`, which keeps them once `_restore` gives the model
        another slot's; a fresh slot still unchanged keeps the shared initial instead."""
        self._notice_changes(slot)
        if slot.state is None or slot.fingerprint != slot.synced:
            slot.state = {name: param.detach() for name, param in self._lora_params()}
            slot.synced = slot.fingerprint

    def _restore(self, slot: AdapterSlot) -> None:
        """Make `slot`'s tensors the model's LoRA tensors: handed over, not copied, so they
        exist once. A fresh slot gets a copy of the initial, which it may write into."""
        state = self._read_back(slot)
        if state is self._initial:
            state = self._snapshot(state)
        else:
            slot.state = None
        with torch.no_grad():
            for name, param in self._lora_params():
                param.data = state[name].to(param.device)

    def _evict(self) -> None:
        """Spill the least recently used slots past `max_resident` (never the live one)."""
        live = self._live
        own = [s for s in list(self._slots) if self._holds_own(s) and s is not live and not s.pins]
        held = sum(1 for s in list(self._slots) if s.pins and s is not live and self._holds_own(s))
        live_own = live is not None and self._holds_own(live)
        excess = len(own) + held + live_own - self.max_resident
        for slot in sorted(own, key=lambda s: s.used)[: max(0, excess)]:
            assert slot.state is not None
            if self._spill_dir is None:
                self._spill_dir = tempfile.TemporaryDirectory(prefix="continual-lsp-adapters-")
            path = Path(self._spill_dir.name) / f"slot-{slot.id}.safetensors"
            started = time.perf_counter()
            save_file(slot.state, str(path))
            slot.spill, slot.state = path, None
            self.spills += 1
            self.swap_s += time.perf_counter() - started
        if excess > 0:
            release_freed_memory()

    # -- the live tensors --------------------------------------------------------------------

    def _lora_params(self) -> Iterator[tuple[str, torch.nn.Parameter]]:
        for name, param in self.model.named_parameters():
            if "lora_" in name and TRAINED in name:
                yield name, param

    def _snapshot(self, state: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """A copy of `state`, else of the live LoRA tensors. Never an inference tensor,
        whatever mode the caller is in: it may become a parameter's data, which autograd
        must be able to use in a later train step."""
        source = state if state is not None else dict(self._lora_params())
        with torch.inference_mode(False), torch.no_grad():
            return {name: t.detach().clone() for name, t in source.items()}

    def _initial_state(self) -> dict[str, torch.Tensor]:
        """The fresh adapter as peft made it. Its B matrices are zero, held as a broadcast
        zero each (half the adapter's 7 MB, else zeros kept for the life of the host);
        `_snapshot` turns them back into tensors of their own for a slot to write into."""
        return {
            name: torch.zeros((), dtype=t.dtype, device=t.device).expand(t.shape)
            if "lora_B" in name and not t.any()
            else t
            for name, t in self._snapshot().items()
        }

    def _fingerprint(self) -> tuple[Any, ...]:
        """Changes with every write to the live LoRA tensors: in-place writes bump the
        version counter; a replaced parameter changes identity; writes through `.data`
        bypass the counter, and the checksum catches them (~2 ms for 1.8 M parameters)."""
        params = list(self._lora_params())
        versions = tuple((id(p), p._version) for _, p in params)
        with torch.no_grad():
            sums = [p.sum(dtype=torch.float64) for _, p in params]
            checksum = float(torch.stack(sums).sum()) if sums else 0.0
        return versions, checksum

    # -- prompt caches -----------------------------------------------------------------------

    def cache_room(self, tokens: int) -> bool:
        """Whether `tokens` more tokens of K/V fit the prompt-cache bounds without
        clearing another user's cache (a warm-up that would is not worth its prefill)."""
        config = self.model.get_base_model().config
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        size = next(self.model.parameters()).element_size()
        need = tokens * 2 * config.num_hidden_layers * heads * dim * size
        with self.lock:
            held = [c for ref in self._caches.values() if (c := ref()) is not None and c.entries]
            total = sum(prompt_cache_bytes(c) for c in held)
        return len(held) < self.max_prompt_caches and total + need <= self.max_prompt_cache_bytes

    def note_cache(self, cache: PromptCache) -> None:
        """`cache` was just used; clear the least recently used others while more than
        `max_prompt_caches` hold entries or they hold more than `max_prompt_cache_bytes`.
        `cache` itself is kept whatever its size: it is the running turn's."""
        with self.lock:
            self._caches.pop(id(cache), None)
            self._caches[id(cache)] = weakref.ref(cache)
            held: list[tuple[PromptCache, int]] = []  # least recently used first
            for key, ref in list(self._caches.items()):
                c = ref()
                if c is None or not c.entries:
                    self._caches.pop(key)
                else:
                    held.append((c, prompt_cache_bytes(c)))
            count, total = len(held), sum(size for _, size in held)
            cleared = False
            for c, size in held:
                if count <= self.max_prompt_caches and total <= self.max_prompt_cache_bytes:
                    break
                if c is cache:
                    continue
                c.clear()
                self._caches.pop(id(c))
                count, total, cleared = count - 1, total - size, True
            self.prompt_cache_bytes = total
            if cleared:
                release_freed_memory()


def prompt_cache_bytes(cache: PromptCache) -> int:
    """Bytes of the K/V tensors `cache` holds (each storage once: entries may share)."""
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for _, layers, _ in cache.entries
        for pair in layers
        for t in pair
    }
    return sum(storages.values())


def release_freed_memory() -> None:
    """Hand freed heap back to the OS (glibc only; elsewhere a no-op). Without it malloc
    keeps what a dropped K/V cache or a spilled adapter held for this process: measured
    40 MB of 1.1 GB after six users' first proposals, 29 MB after the model load."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


_hosts: dict[HostKey, ModelHost] = {}
_hosts_lock = threading.Lock()


def shared_host(settings: Settings, dtype: str = "float32") -> ModelHost:
    """The process's host for `settings`' model in `dtype`, loaded on first use and kept
    for the life of the process (a server reconnecting users must not reload it). The
    agents sample on a `sample_dtype` host; a training worker keeps float32."""
    key = HostKey.of(settings, dtype)
    # The load lock first, as `make_policy` takes it: the server's preload thread came
    # here holding `_hosts_lock` and then waited for the load lock, which an agent's
    # `make_policy` held while it waited for `_hosts_lock` (a fresh server hung).
    with LOAD_LOCK, _hosts_lock:
        host = _hosts.get(key)
        if host is None:
            host = _hosts[key] = ModelHost.load(settings, dtype)
            host.enable_batching()
        return host
