"""Policies for the multi-user host tests (model host, batched decode)."""

from __future__ import annotations

import torch

from continual_lsp.config import Settings
from continual_lsp.policy.local.local_policy import LocalPolicy
from continual_lsp.policy.local.model_host import ModelHost


def user_on(host: ModelHost, name: str, seed: int | None) -> LocalPolicy:
    """A policy on `host`; with `seed`, its adapter set to noise large enough to change
    what it proposes (None: the fresh adapter, i.e. the base model)."""
    policy = LocalPolicy(Settings(user=name), host=host)
    if seed is not None:
        generator = torch.Generator().manual_seed(seed)
        with policy.exclusive(), torch.no_grad():
            for param_name, param in policy.model.named_parameters():
                if "lora_B" in param_name:
                    param.copy_(0.05 * torch.randn(param.shape, generator=generator))
    return policy
