"""The adapter registry: the store's adapter versions and which one a policy serves.

One rule for the agent's sampler and the training worker alike: serve the newest active
version that is intact. A version whose file no longer matches the sha256 recorded when
it was written (truncated, edited, missing) is passed over for the one before it, and no
usable version means the base weights. A backend that manages its versions
(`Sampler.manages_versions`) keeps and checks them itself, and loads them by name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from continual_lsp.config import Settings, default_store_path
from continual_lsp.policy.base import Sampler
from continual_lsp.store.db import Store

Adapter = dict[str, Any]  # a row of `Store.adapters()`

# What a version directory of the local backend holds (policy/adapter_files.py writes it).
ADAPTER_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def adapters_dir(settings: Settings, store_path: str | Path | None = None) -> Path:
    """Where adapter versions are written: `settings.adapters_dir`, else `adapters/<user>`
    beside the store file (`store_path`, else the settings' own)."""
    if settings.adapters_dir:
        return Path(settings.adapters_dir).expanduser()
    store = store_path or settings.store_path or default_store_path(settings.user)
    return Path(store).expanduser().parent / "adapters" / settings.user


def version_name(version: int) -> str:
    """The name (and folder) of adapter version `version`: `v0001`, `v0002`, …"""
    return f"v{version:04d}"


def damage(adapter: Adapter) -> str | None:
    """Why a version's local file cannot be trusted, or None."""
    path = Path(adapter["path"])
    file = path / ADAPTER_FILE if path.is_dir() else path
    if not file.is_file():
        return f"{file} is missing"
    actual = sha256_file(file)
    if actual != adapter["sha256"]:
        return f"{file} has sha256 {actual[:12]}…, recorded {adapter['sha256'][:12]}…"
    return None


class AdapterRegistry:
    def __init__(self, store: Store) -> None:
        self.store = store

    def newest_active(self) -> Adapter | None:
        return next((a for a in reversed(self.store.adapters()) if a["active"]), None)

    def newest_intact(
        self,
        policy: Sampler,
        on_damaged: Callable[[Adapter, str], None],
        *,
        served: str | None = None,
    ) -> Adapter | None:
        """The newest active version `policy` can serve (None: the base weights).

        `served`: the name of the version the policy holds now, taken as it is without
        reading its file again. `on_damaged(adapter, problem)` for every version passed
        over, newest first.
        """
        for adapter in reversed(self.store.adapters()):
            if not adapter["active"]:
                continue
            if adapter["name"] == served or policy.manages_versions:
                return adapter
            problem = damage(adapter)
            if problem is None:
                return adapter
            on_damaged(adapter, problem)
        return None

    @staticmethod
    def serve(policy: Sampler, adapter: Adapter | None) -> None:
        """Load `adapter` into `policy`; None: the base weights."""
        if adapter is None:
            policy.load_adapter("")  # "" = no adapter, on every backend
        else:
            policy.load_adapter(adapter["name"] if policy.manages_versions else adapter["path"])
