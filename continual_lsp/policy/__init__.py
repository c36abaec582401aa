"""Policy backends behind one protocol (see base.py)."""

from __future__ import annotations

from continual_lsp.config import Settings
from continual_lsp.policy.base import Policy


def make_policy(settings: Settings, *, shared: bool = False) -> Policy:
    """The configured backend's policy. `shared` (local backend): on the process's one
    copy of the model (`model_host.shared_host`), with this policy's own adapter; the
    server's agents use it, a training worker does not (it trains in place)."""
    if settings.backend == "tinker":
        from continual_lsp.policy.tinker_backend import TinkerPolicy

        return TinkerPolicy.from_settings(settings)
    from continual_lsp.policy.local import LocalPolicy

    if shared:
        from continual_lsp.policy.model_host import shared_host

        return LocalPolicy(settings, host=shared_host(settings))
    return LocalPolicy(settings)
