"""Load the process's shared model ahead of the first agent (the server's start)."""

from __future__ import annotations

import logging
import time

from continual_lsp.config import Settings

log = logging.getLogger(__name__)


def preload_model(settings: Settings) -> None:
    """The local backend's shared model host for `settings`, loaded now (a no-op for a
    backend whose model is elsewhere): the first editor to connect then waits for no
    model load, merge or grammar compile (issue 34). Logs how long each part took."""
    if settings.backend != "local":
        return
    started = time.perf_counter()
    # deferred: torch and transformers, loaded here on purpose, after the server is up
    from continual_lsp.policy.local.model_host import shared_host
    from continual_lsp.policy.model_files import resolve_dtype

    imported = time.perf_counter()
    dtype = resolve_dtype(settings.sample_dtype, settings.device)
    chosen = time.perf_counter()
    host = shared_host(settings, dtype)
    parts = {
        "imports": round(imported - started, 2),
        "dtype": round(chosen - imported, 2),
        **host.load_seconds,
    }
    log.info(
        "model ready in %.2f s (%s): %s",
        time.perf_counter() - started,
        dtype,
        ", ".join(f"{name} {seconds:.2f} s" for name, seconds in parts.items()),
    )
