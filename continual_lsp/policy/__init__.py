"""Policy backends behind one protocol (see base.py)."""

from __future__ import annotations

from continual_lsp.config import Settings
from continual_lsp.policy.base import Policy


def make_policy(settings: Settings) -> Policy:
    if settings.backend == "tinker":
        from continual_lsp.policy.tinker_backend import TinkerPolicy

        return TinkerPolicy.from_settings(settings)
    from continual_lsp.policy.local import LocalPolicy

    return LocalPolicy(settings)
