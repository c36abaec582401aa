"""Adapter files of the local backend: versions written atomically, loaded in place.

Adapter files: `save_adapter` writes `<dir>/<name>/adapter_model.safetensors` (+ peft's
`adapter_config.json`) into a hidden `.partial-*` directory, fsyncs, then renames it into
place, so a version directory either exists complete or not at all. `load_adapter`
copies the weights into the live peft model (no base reload) and checks the sha256.

A version directory holds `adapter_registry.ADAPTER_FILE` and `CONFIG_FILE`, and
beside them each companion adapter's weights (the EMA teacher).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save_file

from continual_lsp.policy.adapter_registry import ADAPTER_FILE, CONFIG_FILE, sha256_file
from continual_lsp.policy.base import AdapterInfo
from continual_lsp.policy.local.kv_cache import TRAINED_ADAPTER, LoraHolder

PARTIAL_PREFIX = ".partial-"
log = logging.getLogger(__name__)


class AdapterIntegrityError(RuntimeError):
    """An adapter file does not match its recorded sha256, or does not fit the model."""


def adapter_state(policy: LoraHolder, adapter: str = TRAINED_ADAPTER) -> dict[str, torch.Tensor]:
    """The adapter's tensors under peft's portable keys (no adapter name), detached copies."""
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(policy.model, adapter_name=adapter)
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}


def set_adapter_state(
    policy: LoraHolder, state: dict[str, torch.Tensor], adapter: str = TRAINED_ADAPTER
) -> None:
    """Copy `state` into the live adapter; every LoRA tensor must be present and fit."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    # Names only: `adapter_state` would clone every tensor (7 MB) to read its keys.
    expected = set(get_peft_model_state_dict(policy.model, adapter_name=adapter))
    missing = expected - set(state)
    unexpected = set(state) - expected
    if missing or unexpected:
        raise AdapterIntegrityError(
            f"adapter does not fit this model: {len(missing)} tensors missing, "
            f"{len(unexpected)} unexpected (e.g. {sorted(missing or unexpected)[:2]})"
        )
    set_peft_model_state_dict(policy.model, state, adapter_name=adapter)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def save_adapter(policy: LoraHolder, name: str, directory: str | Path) -> AdapterInfo:
    """Write the trained adapter as version `name` under `directory`, atomically.

    The files go to a hidden `.partial-*` sibling first and are fsynced; one `os.replace`
    then publishes the directory, so `directory/name` is complete or absent even if the
    process dies mid-write (leftover partials are removed by `clean_partial`). Versions
    are immutable: an existing `name` is an error.
    """
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"bad adapter name {name!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / name
    if target.exists():
        raise FileExistsError(f"adapter version {target} already exists")
    state = adapter_state(policy)
    tmp = Path(tempfile.mkdtemp(dir=directory, prefix=PARTIAL_PREFIX))
    try:
        save_file(state, str(tmp / ADAPTER_FILE), metadata={"format": "pt"})
        config = policy.model.peft_config[TRAINED_ADAPTER].to_dict()
        (tmp / CONFIG_FILE).write_text(json.dumps(_jsonable(config), indent=1, sort_keys=True))
        # Companion adapters (the EMA teacher) travel with the version, so a restarted
        # worker or a revert gets the teacher that belonged to these weights.
        companions = {a: companion_file(a) for a in _companions(policy)}
        for adapter, file in companions.items():
            save_file(adapter_state(policy, adapter), str(tmp / file), metadata={"format": "pt"})
        for file in (ADAPTER_FILE, CONFIG_FILE, *companions.values()):
            with open(tmp / file, "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(tmp)
        os.replace(tmp, target)
        _fsync_dir(directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return AdapterInfo(name=name, path=str(target), sha256=sha256_file(target / ADAPTER_FILE))


def companion_file(adapter: str) -> str:
    """File name of a companion adapter's weights inside a version directory."""
    return f"{adapter}.safetensors"


def _companions(policy: LoraHolder) -> list[str]:
    """Adapters beside the trained one (the EMA teacher), by peft name."""
    return [a for a in policy.model.peft_config if a != TRAINED_ADAPTER]


def saved_companion(policy: LoraHolder, adapter: str) -> dict[str, torch.Tensor] | None:
    """`adapter`'s weights saved with the version the policy has loaded, if any."""
    version = policy.adapter_version
    directory = getattr(policy, "adapters_dir", None)  # a toy model keeps no versions
    if not version or directory is None:
        return None
    return _read_companion(Path(directory) / version / companion_file(adapter))


def _read_companion(file: Path) -> dict[str, torch.Tensor] | None:
    # A companion is not covered by the version's checksum: an unreadable one is dropped
    # (the teacher restarts from the student), it must not fail the version's load.
    if not file.is_file():
        return None
    try:
        return load_safetensors_bytes(file.read_bytes())
    except Exception as exc:
        log.warning("ignoring unreadable companion adapter %s: %s", file, exc)
        return None


@torch.no_grad()
def _sync_companions(policy: LoraHolder, version_dir: Path | None) -> None:
    """After the trained adapter changed wholesale (load, revert): each companion takes
    the weights saved with that version, else a copy of the trained adapter."""
    for adapter in _companions(policy):
        saved = None
        if version_dir is not None:
            saved = _read_companion(version_dir / companion_file(adapter))
        set_adapter_state(policy, saved or adapter_state(policy), adapter=adapter)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def _adapter_file(path: str | Path) -> Path:
    path = Path(path)
    return path / ADAPTER_FILE if path.is_dir() else path


def load_adapter(policy: LoraHolder, path: str | Path, sha256: str | None = None) -> None:
    """Load adapter weights from a version directory (or its safetensors file) in place.

    The base model is not reloaded: the tensors are copied into the existing LoRA
    modules, so logprobs afterwards equal those of the weights that were saved, bit for
    bit. The bytes are read once, hashed and parsed from memory, so the sha256 check
    covers exactly what is loaded. Resets the optimizer state and the prefix cache.
    """
    file = _adapter_file(path)
    data = file.read_bytes()
    if sha256 is not None:
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise AdapterIntegrityError(f"{file}: sha256 {actual} does not match {sha256}")
    state = load_safetensors_bytes(data)
    with torch.no_grad():
        set_adapter_state(policy, state)
    _sync_companions(policy, file.parent)
    policy.train_state.bump(reset_optimizers=True)
    policy.adapter_version = file.parent.name


def reset_adapter(policy: LoraHolder) -> None:
    """Back to the base model: zero every LoRA B matrix (the adapter's initial state)."""
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name and f".{TRAINED_ADAPTER}." in name:
                param.zero_()
    _sync_companions(policy, None)
    policy.train_state.bump(reset_optimizers=True)
    policy.adapter_version = None


def list_adapters(directory: str | Path, with_sha256: bool = True) -> list[AdapterInfo]:
    """Complete adapter versions under `directory`, oldest first (partials are skipped)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for child in directory.iterdir():
        if child.name.startswith(".") or not (child / ADAPTER_FILE).is_file():
            continue
        sha = sha256_file(child / ADAPTER_FILE) if with_sha256 else ""
        found.append(
            (
                child.stat().st_mtime_ns,
                child.name,
                AdapterInfo(name=child.name, path=str(child), sha256=sha),
            )
        )
    return [info for _, _, info in sorted(found, key=lambda t: (t[0], t[1]))]


def clean_partial(directory: str | Path) -> int:
    """Remove `.partial-*` leftovers of a save that died; returns how many were removed."""
    directory = Path(directory)
    if not directory.is_dir():
        return 0
    removed = 0
    for child in directory.glob(PARTIAL_PREFIX + "*"):
        shutil.rmtree(child, ignore_errors=True)
        removed += 1
    return removed
