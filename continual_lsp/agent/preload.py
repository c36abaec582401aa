"""Load the process's shared model ahead of the first agent (the server's start)."""

from __future__ import annotations

from continual_lsp.config import Settings


def preload_model(settings: Settings) -> None:
    """The local backend's shared model host for `settings`, loaded now (a no-op for a
    backend whose model is elsewhere): the first editor to connect then waits for no
    model load, merge or grammar compile (issue 34)."""
    if settings.backend != "local":
        return
    # deferred: torch and transformers, loaded here on purpose, after the server is up
    from continual_lsp.policy.local.model_host import shared_host
    from continual_lsp.policy.model_files import resolve_dtype

    shared_host(settings, resolve_dtype(settings.sample_dtype, settings.device))
