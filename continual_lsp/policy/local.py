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

import copy
import os
from pathlib import Path
from typing import Any

import platformdirs
import torch
from peft import LoraConfig, PeftModel, get_peft_model

from continual_lsp.config import Settings
from continual_lsp.policy.base import (
    AdapterInfo,
    Completion,
    Datum,
    LossName,
    SampleParams,
    TrainMetrics,
)
from continual_lsp.policy.grammar import ToolCallGrammar, constrained_decode
from continual_lsp.policy.model_files import load_model_and_tokenizer
from continual_lsp.policy.render import ChatMLRenderer


def default_adapters_dir(settings: Settings) -> Path:
    """`settings.adapters_dir`, else an `adapters/<user>` folder beside the store."""
    if settings.adapters_dir:
        return Path(settings.adapters_dir).expanduser()
    if settings.store_path:
        return Path(settings.store_path).expanduser().parent / "adapters" / settings.user
    return Path(platformdirs.user_data_dir("continual-lsp")) / "adapters" / settings.user


class LocalPolicy:
    """Implements `policy.base.Policy` with a local causal LM and one LoRA adapter.

    Attributes used by `training.py`: `model` (the PeftModel), `tokenizer`, `settings`,
    and `adapter_version` (settable; None = the fresh, zero adapter).
    """

    backend: str = "local"

    def __init__(
        self, settings: Settings, model_and_tokenizer: tuple[Any, Any] | None = None
    ) -> None:
        # Torch defaults to the physical core count on some builds and 1 on others; the
        # sampler is the only heavy work in this process, so let it use every core.
        torch.set_num_threads(os.cpu_count() or 1)
        self.settings = settings
        self.model_name: str = settings.model
        if model_and_tokenizer is None:
            base, tokenizer = load_model_and_tokenizer(settings.model, settings.device)
        else:
            # A caller-supplied model (the tests' session fixture) is shared: get_peft_model
            # injects LoRA layers into the module in place, which would change it for every
            # other user. Copy it first; 135M parameters copy in well under a second.
            base, tokenizer = model_and_tokenizer
            base = copy.deepcopy(base)
        self.tokenizer: Any = tokenizer
        config = LoraConfig(
            r=settings.lora_rank,
            lora_alpha=2 * settings.lora_rank,
            target_modules=list(settings.lora_targets),
            lora_dropout=0.0,
            task_type="CAUSAL_LM",
        )
        self.model: PeftModel = get_peft_model(base, config)
        self.model.eval()
        self._renderer = ChatMLRenderer(tokenizer)
        self.grammar = ToolCallGrammar(tokenizer)
        self._adapter_version: str | None = None
        self.adapters_dir: Path = default_adapters_dir(settings)

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

    def sample(self, prompt_tokens: list[int], params: SampleParams) -> Completion:
        """One tool call decoded under the grammar, with per-token logprobs (grammar.py)."""
        return constrained_decode(self.model, self.grammar, prompt_tokens, params)

    def logprobs(self, prompt_tokens: list[int], completion_tokens: list[int]) -> list[float]:
        """Current weights' logprob of each completion token: one forward pass, no grad."""
        return self._score(prompt_tokens, completion_tokens)

    def reference_logprobs(
        self, prompt_tokens: list[int], completion_tokens: list[int]
    ) -> list[float]:
        """The same scores under the frozen base model (adapter disabled)."""
        with self.model.disable_adapter():
            return self._score(prompt_tokens, completion_tokens)

    def _score(self, prompt_tokens: list[int], completion_tokens: list[int]) -> list[float]:
        if not completion_tokens:
            return []
        if not prompt_tokens:
            raise ValueError("logprobs needs a non-empty prompt")
        ids = torch.tensor([prompt_tokens + completion_tokens], dtype=torch.long, device=self.device)
        n = len(completion_tokens)
        with torch.inference_mode():
            # Logits of the last n + 1 positions: position P-1 predicts the first completion
            # token, the very last position predicts past the end and is dropped.
            out = self.model(input_ids=ids, use_cache=False, logits_to_keep=n + 1)
            log_probs = torch.log_softmax(out.logits[0, :-1].float(), dim=-1)
            targets = ids[0, -n:]
            picked = log_probs.gather(1, targets[:, None])[:, 0]
        return [float(x) for x in picked.tolist()]

    # -- training and adapters (training.py) -----------------------------------------------

    def train_step(
        self, batch: list[Datum], loss: LossName, lr: float, **options: Any
    ) -> TrainMetrics:
        from continual_lsp.policy import training

        return training.train_step(self, batch, loss, lr, **options)

    def save_adapter(self, name: str) -> AdapterInfo:
        from continual_lsp.policy import training

        return training.save_adapter(self, name, self.adapters_dir)

    def load_adapter(self, name: str) -> None:
        """Load an adapter by file/directory path, or by name inside `adapters_dir`."""
        from continual_lsp.policy import training

        path = Path(name).expanduser()
        if not path.is_absolute() and not path.exists():
            path = self.adapters_dir / name
        training.load_adapter(self, path)
