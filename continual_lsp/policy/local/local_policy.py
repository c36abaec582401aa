"""LocalPolicy: transformers + peft on this machine (CPU by default), DESIGN §3.

The base model, wrapped in a peft LoRA adapter, lives in a `ModelHost` (model_host.py):
one per policy, or one per process shared by every user's policy, each of which then has
its adapter copied in for the length of a call. LoRA's B matrices start at zero, so a
fresh adapter computes exactly the base model; training changes only the adapter, and
adapter versions (files) are swapped without reloading the base model.
`reference_logprobs` scores with the adapter disabled: the frozen reference for KL.

Sampling lives in `decode.py` and `candidate_tree.py` (constrained decoding); LoRA
training in `lora_step.py` and adapter files in `adapter_files.py` — the `train_step` /
`save_adapter` / `load_adapter` methods here only delegate, so this module stays the one place that owns model construction.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Unpack

import torch
from peft import PeftModel

from continual_lsp.config import Settings
from continual_lsp.policy.adapter_registry import adapters_dir
from continual_lsp.policy.base import (
    AdapterInfo,
    Completion,
    Datum,
    DecodeRestrictions,
    LossName,
    Message,
    SampleParams,
    TrainMetrics,
    TrainOptions,
)
from continual_lsp.policy.call_schema import check_tools, decoding_schema
from continual_lsp.policy.hf_compat import cache_keyword, returned_cache
from continual_lsp.policy.local import adapter_files, lora_step
from continual_lsp.policy.local.batch_decode import open_row
from continual_lsp.policy.local.batch_forward import Adapter
from continual_lsp.policy.local.candidate_tree import (
    CandidateTree,
    constrained_decode_batch,
    tree_forward,
)
from continual_lsp.policy.local.decode import constrained_decode
from continual_lsp.policy.local.grammar import ToolCallGrammar
from continual_lsp.policy.local.kv_cache import (
    TRAINED_ADAPTER,
    PromptCache,
    TrainState,
    common_prefix,
)
from continual_lsp.policy.local.logit_scorer import LocalLogitScorer
from continual_lsp.policy.local.model_host import ModelHost
from continual_lsp.policy.local.prefix_store import PrefixStore, model_identity, weights_digest
from continual_lsp.policy.model_files import cache_dir, resolve_dtype
from continual_lsp.policy.render import ChatMLRenderer
from continual_lsp.tools.base import TOOL_NAMES

# Compiled grammars kept per model (an allow-list, the guards' limits, a file list each).
MAX_GRAMMARS = 64


def torch_threads() -> int:
    """Intra-op threads: `CONTINUAL_LSP_THREADS`, else half the cores this process may use.

    Why not every core: this process shares the machine with the training worker (its own
    process) and the editor. Measured on the 2-core build machine with busy neighbours
    (load average 5-9): one decode step took ~110 ms with 1 thread and 600-1100 ms with 2
    (OpenMP threads wait for each other at every barrier, and a descheduled one stalls
    all). With the cores to itself, 2 threads gain little on a 576-wide model. So the
    default leaves half the cores free; set CONTINUAL_LSP_THREADS to override.
    """
    env = os.environ.get("CONTINUAL_LSP_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        cores = len(os.sched_getaffinity(0))  # respects taskset / cgroup cpusets
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // 2)


class LocalPolicy:
    """Implements `policy.base.Policy` with a local causal LM and one LoRA adapter.

    Attributes used by `lora_step.py` and `adapter_files.py`: `model` (the PeftModel), `tokenizer`, `settings`,
    and `adapter_version` (settable; None = the fresh, zero adapter). Its own methods hold
    the model (`exclusive()`) for each call; code that uses `.model` directly on a shared
    host must do the same.
    """

    backend: str = "local"
    manages_versions: bool = False  # version files are written and checked by the caller

    def __init__(
        self,
        settings: Settings,
        model_and_tokenizer: tuple[Any, Any] | None = None,
        *,
        host: ModelHost | None = None,
    ) -> None:
        """`host`: a model shared with other policies (`model_host.shared_host`); without
        one, a host of its own, on `model_and_tokenizer` (copied) or loaded from files."""
        torch.set_num_threads(torch_threads())
        self.settings = settings
        self.model_name: str = settings.model
        if host is None:
            host = (
                ModelHost.load(settings)
                if model_and_tokenizer is None
                else ModelHost.private(settings, model_and_tokenizer)
            )
        self.host = host
        self.tokenizer: Any = host.tokenizer
        self._slot = host.slot(settings.user)
        # The prompt lists only the allowed tools; SampleParams.tools can narrow further.
        self._renderer = ChatMLRenderer(self.tokenizer, tools=settings.allowed_tools)
        self.grammar = host.grammar  # every tool and done
        # Set by whoever saves or loads this policy's weights (adapter_files.py).
        self.adapter_version: str | None = None
        self.train_state = TrainState()
        # KV of the last prompts; consecutive agent turns share most of their prompt. Its
        # entries are keyed by this policy's slot and weights generation (`weights_key`).
        self.prompt_cache = PromptCache()
        self.sampled = False  # a call has been sampled: its prefill covers `warm_prompt`'s
        self.adapters_dir: Path = adapters_dir(settings)
        self._prefixes = PrefixStore(
            cache_dir().parent / "prompt-prefixes", int(settings.prompt_prefix_disk_mb * 2**20)
        )
        self._digest: tuple[Any, str | None] | None = None  # (weights key, its digest)
        self._kept: Any = None  # the weights key whose prefix is on disk, or cannot be

    @property
    def model(self) -> PeftModel:
        """The (maybe shared) model. Use it directly only inside `exclusive()`."""
        return self.host.model

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        """Hold the model, with this policy's adapter live, for a block of direct use."""
        return self.host.serving(self._slot)

    # -- Policy protocol: identity ---------------------------------------------------------

    @property
    def renderer(self) -> ChatMLRenderer:
        return self._renderer

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def logit_scorer(self) -> LocalLogitScorer:
        """Full distributions, grammar masks and the EMA teacher (logit_scorer.py)."""
        self.train_state.autocast = self._train_autocast  # it scores for the step too
        return LocalLogitScorer(self, self.grammar)

    @functools.cached_property
    def _train_autocast(self) -> torch.dtype | None:
        """`Settings.train_dtype` for `TrainState.autocast`: measured on first use, once
        per CPU model (`model_files.resolve_dtype`), not at load: a sampler never trains."""
        dtype = resolve_dtype(self.settings.train_dtype, self.settings.device, "train")
        return torch.bfloat16 if dtype == "bfloat16" else None

    # -- sampling and scoring --------------------------------------------------------------

    def weights_key(self) -> tuple[Any, ...]:
        """Identifies the current weights, so a prompt cache never outlives them: this
        policy's slot and the generation of its weights (bumped by the host on every
        change, by whatever route), the version name and the active peft adapter.
        Valid inside `exclusive()`."""
        return (
            self._slot.id,
            self._slot.generation,
            self.adapter_version,
            str(self.model.active_adapter),
        )

    def grammar_for(
        self, tools: list[str] | None, forbid: DecodeRestrictions | None = None
    ) -> ToolCallGrammar:
        """The grammar for an allow-list of tools and the guards' restrictions (compiled
        once per distinct pair)."""
        allowed = check_tools(tools)
        if allowed == TOOL_NAMES and forbid is None:
            return self.grammar
        key = (allowed, forbid.key() if forbid is not None else "")
        grammars = self.host.grammars
        with self.host.grammars_lock:
            grammar = grammars.get(key)
            if grammar is not None:
                grammars.move_to_end(key)
                return grammar
        # Compiled outside the lock (a few ms; a rare race compiles one twice: harmless).
        grammar = ToolCallGrammar(
            self.tokenizer, decoding_schema(allowed, forbid), ll_tokenizer=self.grammar.ll_tokenizer
        )
        with self.host.grammars_lock:
            grammars[key] = grammar
            while len(grammars) > MAX_GRAMMARS:
                grammars.popitem(last=False)
        return grammar

    def sample(self, prompt_tokens: list[int], params: SampleParams) -> Completion:
        """One tool call decoded under the grammar, with per-token logprobs (grammar.py).

        `params.tools` restricts the call to those tools (ValueError if one is unknown);
        when it is None, `settings.allowed_tools` applies (None there too: every tool and done).
        On a host that decodes together (`ModelHost.enable_batching`), the prefill and
        the decode steps run in the host's batch with other users'.
        """
        self.sampled = True
        scheduler = self.host.scheduler
        if scheduler is None or self.host.holds_lock():
            alone = functools.partial(constrained_decode, draft=self.settings.draft_tokens)
            return self._decode(alone, prompt_tokens, params)
        tools = params.tools if params.tools is not None else self.settings.allowed_tools
        grammar = self.grammar_for(tools, params.forbid)
        with self.exclusive():
            key = self.weights_key()
            self._restore_prefix(key)
            zero = self._adapter_is_zero()
            slot = self._slot

            def adapter() -> Adapter:
                return None if zero else self.host.adapter_of(slot)

            row = open_row(
                self.model, grammar, prompt_tokens, params, adapter, self.prompt_cache, key,
                draft=self.settings.draft_tokens,
            )  # fmt: skip
            self.host.pin(slot, True)
        try:
            completion = scheduler.submit(row).result()
        finally:
            self.host.pin(slot, False)
        self._keep_prefix(key)
        return completion

    def sample_batch(
        self, prompt_tokens: list[int], params: SampleParams, n: int
    ) -> list[Completion]:
        """`n` calls from one prompt in one batched decode (`constrained_decode_batch`)."""
        together = functools.partial(constrained_decode_batch, draft=self.settings.draft_tokens)
        return self._decode(together, prompt_tokens, params, n)

    def _decode(
        self, decode: Callable[..., Any], prompt_tokens: list[int], params: SampleParams, *n: int
    ) -> Any:
        tools = params.tools if params.tools is not None else self.settings.allowed_tools
        grammar = self.grammar_for(tools, params.forbid)
        with self.exclusive():
            key = self.weights_key()
            self._restore_prefix(key)
            with self._skip_zero_adapter():
                out = decode(
                    self.model,
                    grammar,
                    prompt_tokens,
                    params,
                    *n,
                    prompt_cache=self.prompt_cache,
                    weights_key=key,
                )
            # Still holding the model: released first, this cache would stay unbounded
            # while other users' turns run, one such cache per waiting thread (measured
            # 25-75 MB of K/V past the bound with 8 users asking at once).
            self.host.note_cache(self.prompt_cache)
        self._keep_prefix(key)
        return out

    def _skip_zero_adapter(self) -> contextlib.AbstractContextManager[Any]:
        """Skip the LoRA layers while the active adapter is still zero (no step yet): they
        add exact zeros, yet cost a fifth of every forward pass on CPU (measured), and
        the first correction of a session is sampled on the zero adapter."""
        zero = self._adapter_is_zero()
        return self.model.disable_adapter() if zero else contextlib.nullcontext()

    def _adapter_is_zero(self) -> bool:
        """The active adapter's B matrices are all zero (inside `exclusive()`)."""
        active = f".{self.model.active_adapter}."
        with torch.no_grad():
            return not any(
                bool(p.any())
                for n, p in self.model.named_parameters()
                if "lora_B" in n and active in n
            )

    @functools.cached_property
    def _prefix(self) -> list[int]:
        """The tokens every prompt of this policy starts with: system prompt, tool schema,
        up to the task's words."""
        one, other = (
            self._renderer.render_prompt([Message(role="user", content=f"Task: {word}")])
            for word in ("a", "b")
        )
        return one[: common_prefix(one, other)]

    def _weights_digest(self, key: Any) -> str | None:
        """The disk name of the weights `key` stands for (`prefix_store.weights_digest`),
        once per weights; None where no file names the base or another adapter than the
        trained one is active. Inside `exclusive()`."""
        if self._digest is None or self._digest[0] != key:
            identity = model_identity(self.model)
            digest = None
            if identity is not None and self.model.active_adapter == TRAINED_ADAPTER:
                # A zero adapter is skipped (`_skip_zero_adapter`): K/V of the base alone,
                # the same for every user who has had no lesson yet.
                lora = [] if self._adapter_is_zero() else self.host.adapter_of(self._slot).items()
                digest = weights_digest(identity, lora)
            self._digest = (key, digest)
        return self._digest[1]

    def _restore_prefix(self, key: Any) -> bool:
        """Put the shared prompt start's K/V for `key`'s weights in the prompt cache from
        disk unless it holds it already; whether it holds it now. Inside `exclusive()`;
        names the weights (`_weights_digest`, once per weights) for `_keep_prefix` too."""
        prefix = self._prefix
        digest = self._weights_digest(key)
        if self.prompt_cache.covered(prefix, key)[0] >= len(prefix):
            return True
        layers = None if digest is None else self._prefixes.load(digest, prefix)
        if layers is None:
            return False
        self._kept = key
        self.prompt_cache.put(prefix, layers, key)
        self.host.note_cache(self.prompt_cache)
        return True

    def _keep_prefix(self, key: Any) -> None:
        """Write the shared prompt start's K/V for `key`'s weights to disk, once, from the
        prompt cache (where the call just made put it), by the name `_restore_prefix`
        gave them at the call's start. Without holding the model: the entries read are
        `key`'s own, and the tensors of a cache entry are never written to."""
        if self._kept == key or self._digest is None or self._digest[0] != key:
            return
        digest = self._digest[1]
        shared, layers = self.prompt_cache.covered(self._prefix, key)
        if digest is None:
            self._kept = key
        elif layers is not None and shared >= len(self._prefix):
            self._prefixes.save(digest, self._prefix, layers)
            self._kept = key

    def warm_prompt(self) -> int:
        """Prefill the start every prompt of this policy shares (system prompt, tool
        schema, up to the task's words) into the prompt cache, under the current weights;
        returns the tokens prefilled (0 when the cache already held them, when the
        host's prompt-cache bounds have no room for them, or once a call was sampled:
        a user who asked at once would have the prefix prefilled twice, and twenty
        users opening their editors together waited for eight such warm-ups)."""
        prefix = self._prefix
        if not self.host.cache_room(len(prefix)):
            return 0  # it would clear another user's cache: their next turn prefills it
        with self.exclusive():
            key = self.weights_key()
            if self.sampled or self._restore_prefix(key):
                return 0
            shared, cache = self.prompt_cache.lookup(prefix, key)
            self.prompt_cache.store(prefix, self._prefill(prefix[shared:], cache), key)
            self.host.note_cache(self.prompt_cache)
        self._keep_prefix(key)
        return len(prefix) - shared

    def keep_prompt_prefix(self) -> bool:
        """Write the shared prompt start's K/V under the current weights to disk unless it
        is there: the training worker's idle time after it saved a version, so that the
        server's next proposal for this user (a restarted server's first) reads it back
        instead of prefilling it. Nothing is kept in memory; whether it prefilled."""
        with self.exclusive():
            key = self.weights_key()
            digest = None if self._kept == key else self._weights_digest(key)
            if digest is None or self._prefixes.holds(digest, self._prefix):
                self._kept = key
                return False
            cache = self._prefill(self._prefix, None)
            layers = [(layer.keys, layer.values) for layer in cache.layers]
        self._prefixes.save(digest, self._prefix, layers)
        self._kept = key
        return True

    def _prefill(self, tokens: list[int], cache: Any) -> Any:
        """`tokens` fed after `cache` (None: from the start) under the current weights;
        the cache returned. Inside `exclusive()`."""
        keyword = cache_keyword(self.model)
        with self._skip_zero_adapter(), torch.inference_mode():
            ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
            out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **{keyword: cache})
        return returned_cache(out)

    def logprobs(self, prompt_tokens: list[int], completion_tokens: list[int]) -> list[float]:
        """Current weights' logprob of each completion token (no grad)."""
        return self.logprobs_batch(prompt_tokens, [completion_tokens])[0]

    def logprobs_batch(
        self, prompt_tokens: list[int], completions: list[list[int]]
    ) -> list[list[float]]:
        """`logprobs` of several completions of one prompt: the prompt is prefilled once,
        past the prefix the prompt cache already holds (scoring a retry's candidates
        against the denied turn's prompt costs its tail, not the whole prompt), and the
        completions go through together in one pass, packed after the prompt's K/V
        (shared, not copied per row; `CandidateTree`)."""
        with self.exclusive():
            key = self.weights_key()
            shared, cache = self.prompt_cache.lookup(prompt_tokens, key)
            with self._skip_zero_adapter():
                scores = self._score(prompt_tokens, completions, shared, cache, key)
            self.host.note_cache(self.prompt_cache)  # inside the hold: see `_decode`
        return scores

    def reference_logprobs(
        self, prompt_tokens: list[int], completion_tokens: list[int]
    ) -> list[float]:
        """The same scores under the frozen base model (adapter disabled)."""
        with self.exclusive(), self.model.disable_adapter():
            return self._score(prompt_tokens, [completion_tokens])[0]

    def _score(
        self,
        prompt_tokens: list[int],
        completions: list[list[int]],
        shared: int = 0,
        cache: Any = None,
        store_key: Any = None,
    ) -> list[list[float]]:
        """Scores with the first `shared` prompt tokens' KV given in `cache`, if any; with
        `store_key`, the prompt's KV is kept in the prompt cache for those weights."""
        if not prompt_tokens:
            raise ValueError("logprobs needs a non-empty prompt")
        scores: list[list[float]] = [[] for _ in completions]
        live = [(i, completion) for i, completion in enumerate(completions) if completion]
        if not live:
            return scores
        keyword = cache_keyword(self.model)
        with torch.inference_mode():
            prompt = torch.tensor([prompt_tokens[shared:]], dtype=torch.long, device=self.device)
            out = self.model(input_ids=prompt, use_cache=True, logits_to_keep=1, **{keyword: cache})
            cache = returned_cache(out)
            if store_key is not None:
                self.prompt_cache.store(prompt_tokens, cache, store_key)
            first = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
            tree = CandidateTree(len(prompt_tokens), len(completions))
            ids, mask, positions = tree.step(live)
            logits, _ = tree_forward(self.model, cache, keyword, ids, mask, positions)
            offset = 0
            for i, completion in live:
                # Row t of a completion's logits predicts its token t + 1; its first token
                # was predicted by the prompt's last position. log-softmax at the picked
                # tokens only: a full log-softmax table would double the peak memory.
                own = logits[offset : offset + len(completion) - 1]
                offset += len(completion)
                later = torch.tensor(completion[1:], dtype=torch.long, device=own.device)
                picked = own.gather(1, later[:, None])[:, 0] - torch.logsumexp(own, dim=-1)
                scores[i] = [float(first[completion[0]]), *picked.tolist()]
        return scores

    # -- training and adapters (lora_step.py, adapter_files.py) ------------------------------

    def train_step(
        self, batch: list[Datum], loss: LossName, lr: float, **options: Unpack[TrainOptions]
    ) -> TrainMetrics:
        self.train_state.autocast = self._train_autocast
        with self.exclusive():
            return lora_step.train_step(self, batch, loss, lr, **options)

    def save_adapter(self, name: str) -> AdapterInfo:
        with self.exclusive():
            return adapter_files.save_adapter(self, name, self.adapters_dir)

    @property
    def context_window(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 8192))

    def load_adapter(self, name: str) -> None:
        """Load an adapter by file/directory path, or by name inside `adapters_dir`;
        "" means the base weights (the adapter zeroed)."""
        path = Path(name).expanduser()
        if name and not path.is_absolute() and not path.exists():
            path = self.adapters_dir / name
        with self.exclusive():
            if name:
                adapter_files.load_adapter(self, path)
            else:
                adapter_files.reset_adapter(self)
