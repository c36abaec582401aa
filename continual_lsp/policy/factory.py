"""The configured backend's policy: for the agent (`make_policy`) and the training worker
(`make_trainer`, `trainer_settings`).

The local backend is imported when chosen, not at the top: it loads torch, transformers
and peft. Tinker's and vLLM's modules are light (the tinker SDK loads on first use).
"""

from __future__ import annotations

from typing import cast

from continual_lsp.config import Settings
from continual_lsp.policy.base import Policy, Sampler
from continual_lsp.policy.hf_lock import loads
from continual_lsp.policy.model_files import resolve_dtype
from continual_lsp.policy.tinker.tinker_policy import TinkerPolicy
from continual_lsp.policy.vllm.vllm_policy import VllmPolicy


@loads
def make_policy(settings: Settings, *, shared: bool = False) -> Sampler:
    """The configured backend's policy (a `Policy`, but for vLLM, which only samples).

    `shared` (local backend): on the process's one copy of the model
    (`model_host.shared_host`) in `sample_dtype`, with this policy's own adapter; the
    server's agents use it, a training worker does not (it trains in place, in float32).
    Built under the process's load lock (`hf_lock`): a routed correction's embedder waits.
    """
    if settings.backend == "tinker":
        return TinkerPolicy.from_settings(settings)
    if settings.backend == "vllm":
        return VllmPolicy.from_settings(settings)
    # deferred: torch, transformers and peft, loaded only for the local backend
    from continual_lsp.policy.local.local_policy import LocalPolicy

    if shared:
        # deferred: torch, transformers and peft, as above
        from continual_lsp.policy.local.model_host import shared_host

        dtype = resolve_dtype(settings.sample_dtype, settings.device)
        return LocalPolicy(settings, host=shared_host(settings, dtype))
    return LocalPolicy(settings)


def trainer_settings(settings: Settings) -> Settings:
    """The settings the training worker builds its policy from.

    A vLLM server only samples: with `backend = "vllm"` the worker trains on
    `vllm_trainer` (the local backend on `model`, or Tinker), and the versions it saves
    reach the sampler when the agent serves them (`VllmPolicy.load_adapter`).
    """
    if settings.backend == "vllm":
        return settings.model_copy(update={"backend": settings.vllm_trainer})
    return settings


def make_trainer(settings: Settings) -> Policy:
    """The training worker's policy (`trainer_settings`): a backend that trains, since
    `trainer_settings` never names vllm, the one that only samples."""
    return cast(Policy, make_policy(trainer_settings(settings)))
