"""Policy backends behind one protocol (see base.py)."""

from __future__ import annotations

from continual_lsp.config import Settings
from continual_lsp.policy.base import Policy


def make_policy(settings: Settings) -> Policy:
    """The sampling policy: what the agent proposes with."""
    if settings.backend == "tinker":
        from continual_lsp.policy.tinker_backend import TinkerPolicy

        return TinkerPolicy.from_settings(settings)
    if settings.backend == "vllm":
        from continual_lsp.policy.vllm_backend import VllmPolicy

        return VllmPolicy.from_settings(settings)
    from continual_lsp.policy.local import LocalPolicy

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
    """The training worker's policy (`trainer_settings`)."""
    return make_policy(trainer_settings(settings))
