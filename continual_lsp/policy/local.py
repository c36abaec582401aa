"""LocalPolicy: transformers + peft on this machine (CPU by default), DESIGN §3.

The base model is wrapped in a peft LoRA adapter at construction. LoRA's B matrices
start at zero, so a fresh adapter computes exactly the base model; training changes only
the adapter, and adapter versions (files) are swapped without reloading the base model.
`reference_logprobs` scores with the adapter disabled: the frozen reference for KL.

Sampling lives in `grammar.py` (constrained decoding); LoRA training and adapter files
live in `training.py` — the `train_step` / `save_adapter` / `load_adapter` methods here
only delegate, so this module stays the one place that owns model construction.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Unpack

import torch
from peft import LoraConfig, PeftModel, get_peft_model

from continual_lsp.config import Settings
from continual_lsp.policy.adapter_registry import adapters_dir
from continual_lsp.policy.base import (
    AdapterInfo,
    Completion,
    Datum,
    DecodeRestrictions,
    LossName,
    SampleParams,
    TrainMetrics,
    TrainOptions,
)
from continual_lsp.policy.grammar import (
    CandidateTree,
    PromptCache,
    ToolCallGrammar,
    cache_keyword,
    check_tools,
    constrained_decode,
    constrained_decode_batch,
    decoding_schema,
    tree_forward,
)
from continual_lsp.policy.model_files import load_model_and_tokenizer
from continual_lsp.policy.render import ChatMLRenderer
from continual_lsp.tools.base import TOOL_NAMES


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

    Attributes used by `training.py`: `model` (the PeftModel), `tokenizer`, `settings`,
    and `adapter_version` (settable; None = the fresh, zero adapter).
    """

    backend: str = "local"
    scores_locally: bool = True
    manages_versions: bool = False  # version files are written and checked by the caller

    def __init__(
        self, settings: Settings, model_and_tokenizer: tuple[Any, Any] | None = None
    ) -> None:
        torch.set_num_threads(torch_threads())
        self.settings = settings
        self.model_name: str = settings.model
        if model_and_tokenizer is None:
            base, tokenizer = load_model_and_tokenizer(
                settings.model, settings.device, starter=settings.starter
            )
        else:
            # A caller-supplied model (the tests' session fixture) is shared: get_peft_model
            # injects LoRA layers into the module in place, which would change it for every
            # other user. Copy it first; 135M parameters copy in well under a second.
            base, tokenizer = model_and_tokenizer
            base = copy.deepcopy(base).to(settings.device)
        self.tokenizer: Any = tokenizer
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
        # The prompt lists only the allowed tools; SampleParams.tools can narrow further.
        self._renderer = ChatMLRenderer(tokenizer, tools=settings.allowed_tools)
        self.grammar = ToolCallGrammar(tokenizer)  # all seven tools
        self._grammars: dict[tuple[tuple[str, ...], str], ToolCallGrammar] = {
            (TOOL_NAMES, ""): self.grammar
        }
        self._adapter_version: str | None = None
        # KV of the last prompt; consecutive agent turns share most of their prompt.
        self.prompt_cache = PromptCache()
        # One sampler at a time: the prompt cache is shared state.
        self._lock = threading.Lock()
        self.adapters_dir: Path = adapters_dir(settings)

    # -- Policy protocol: identity ---------------------------------------------------------

    @property
    def renderer(self) -> ChatMLRenderer:
        return self._renderer

    @property
    def adapter_version(self) -> str | None:
        return self._adapter_version

    @adapter_version.setter
    def adapter_version(self, value: str | None) -> None:
        self._adapter_version = value

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- sampling and scoring --------------------------------------------------------------

    def weights_key(self) -> tuple[Any, ...]:
        """Identifies the current weights, so a prompt cache never outlives them.

        Training and adapter loading live in training.py (another module, maybe another
        author), so rather than rely on them to invalidate the cache, we detect change:
        every in-place write through a parameter (optimizer steps, `load_state_dict`)
        bumps its version counter, a replaced parameter changes its identity, and the
        checksum of the trainable (LoRA) weights catches writes through `.data`, which
        bypass the counter. About 2 ms for 1.8 M LoRA parameters.
        """
        versions = tuple((id(p), p._version) for p in self.model.parameters())
        with torch.no_grad():
            trainable = [
                p.sum(dtype=torch.float64) for n, p in self.model.named_parameters() if "lora_" in n
            ]
            checksum = float(torch.stack(trainable).sum()) if trainable else 0.0
        return (self._adapter_version, str(self.model.active_adapter), versions, checksum)

    def grammar_for(
        self, tools: list[str] | None, forbid: DecodeRestrictions | None = None
    ) -> ToolCallGrammar:
        """The grammar for an allow-list of tools and the guards' restrictions (compiled
        once per distinct pair)."""
        allowed = check_tools(tools)
        key = (allowed, forbid.key() if forbid is not None else "")
        grammar = self._grammars.get(key)
        if grammar is None:
            grammar = ToolCallGrammar(
                self.tokenizer,
                decoding_schema(allowed, forbid),
                ll_tokenizer=self.grammar.ll_tokenizer,
            )
            self._grammars[key] = grammar
        return grammar

    def sample(self, prompt_tokens: list[int], params: SampleParams) -> Completion:
        """One tool call decoded under the grammar, with per-token logprobs (grammar.py).

        `params.tools` restricts the call to those tools (ValueError if one is unknown);
        when it is None, `settings.allowed_tools` applies (None there too: all seven).
        """
        return self._decode(constrained_decode, prompt_tokens, params)

    def sample_batch(
        self, prompt_tokens: list[int], params: SampleParams, n: int
    ) -> list[Completion]:
        """`n` calls from one prompt in one batched decode (`constrained_decode_batch`)."""
        return self._decode(constrained_decode_batch, prompt_tokens, params, n)

    def _decode(
        self, decode: Callable[..., Any], prompt_tokens: list[int], params: SampleParams, *n: int
    ) -> Any:
        tools = params.tools if params.tools is not None else self.settings.allowed_tools
        grammar = self.grammar_for(tools, params.forbid)
        with self._lock:
            key = self.weights_key()
            with self._skip_zero_adapter():
                return decode(
                    self.model,
                    grammar,
                    prompt_tokens,
                    params,
                    *n,
                    prompt_cache=self.prompt_cache,
                    weights_key=key,
                )

    def _skip_zero_adapter(self) -> contextlib.AbstractContextManager[Any]:
        """Skip the LoRA layers while the active adapter is still zero (no step yet): they
        add exact zeros, yet cost a fifth of every forward pass on CPU (measured), and
        the first correction of a session is sampled on the zero adapter."""
        active = f".{self.model.active_adapter}."
        with torch.no_grad():
            trained = any(
                bool(p.any())
                for n, p in self.model.named_parameters()
                if "lora_B" in n and active in n
            )
        return contextlib.nullcontext() if trained else self.model.disable_adapter()

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
        with self._lock:
            key = self.weights_key()
            shared, cache = self.prompt_cache.lookup(prompt_tokens, key)
            with self._skip_zero_adapter():
                return self._score(prompt_tokens, completions, shared, cache, key)

    def reference_logprobs(
        self, prompt_tokens: list[int], completion_tokens: list[int]
    ) -> list[float]:
        """The same scores under the frozen base model (adapter disabled)."""
        with self._lock, self.model.disable_adapter():
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
            cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
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

    # -- training and adapters (training.py) -----------------------------------------------

    def train_step(
        self, batch: list[Datum], loss: LossName, lr: float, **options: Unpack[TrainOptions]
    ) -> TrainMetrics:
        from continual_lsp.policy import training

        return training.train_step(self, batch, loss, lr, **options)

    def save_adapter(self, name: str) -> AdapterInfo:
        from continual_lsp.policy import training

        return training.save_adapter(self, name, self.adapters_dir)

    @property
    def context_window(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 8192))

    def load_adapter(self, name: str) -> None:
        """Load an adapter by file/directory path, or by name inside `adapters_dir`;
        "" means the base weights (the adapter zeroed)."""
        from continual_lsp.policy import training

        if not name:
            training.reset_adapter(self)
            return
        path = Path(name).expanduser()
        if not path.is_absolute() and not path.exists():
            path = self.adapters_dir / name
        training.load_adapter(self, path)
