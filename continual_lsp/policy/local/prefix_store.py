"""The K/V of the prompt start every call shares, kept on disk by the weights that made it.

Every prompt of a user starts with the same system prompt and tool schema (~290 tokens
on the embedded model), and its K/V depends only on those tokens and the weights: base,
merged starter, the user's adapter, the precision. Prefilling it is the largest part of
a fresh server's first proposal for a user (~1.4 s on a 2-core EPYC, against ~30 ms to
read 13 MB back), and an editor over stdio starts a fresh server every time it opens.
So the prefill is kept here, named by a digest of those weights, and read back by any
later process with the same weights: a restarted team server, the next editor session.

An entry is only ever a cache: a file that cannot be read, or whose tokens differ, is
ignored and prefilled again; the directory is trimmed to its byte bound, least recently
used first, and a bound of 0 keeps nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from continual_lsp.policy.local.kv_cache import KV

log = logging.getLogger(__name__)


def model_identity(model: Any) -> str | None:
    """What names `model`'s base weights (a peft model over a transformers one): the
    directory they were loaded from, its weights file's size and time, the precision
    and the library versions; None for a model built in memory (nothing names it)."""
    import transformers

    base = model.get_base_model()
    source = Path(str(getattr(base.config, "_name_or_path", "") or "."))
    weights = source / "model.safetensors"
    if not source.is_absolute() or not weights.is_file():
        return None
    stat = weights.stat()
    dtype = next(base.parameters()).dtype
    versions = (torch.__version__, transformers.__version__)
    return json.dumps([str(source), stat.st_size, stat.st_mtime_ns, str(dtype), *versions])


def weights_digest(identity: str, lora: Iterable[tuple[str, torch.Tensor]]) -> str:
    """sha256 of what decides a prefix's K/V: `identity` (the base weights' source, the
    precision, the library versions) and every LoRA tensor by name and bytes."""
    digest = hashlib.sha256(identity.encode())
    for name, tensor in sorted(lora, key=lambda item: item[0]):
        digest.update(name.encode())
        t = tensor.detach().contiguous()
        digest.update(str((t.dtype, tuple(t.shape))).encode())
        # bytes through a uint8 view: numpy has no bfloat16
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class PrefixStore:
    """Prefix K/V files under `directory`, at most `max_bytes` in all."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes

    def _file(self, digest: str, tokens: list[int]) -> Path:
        # The tokens too: two prompts (other allowed tools) under one set of weights are
        # two entries, not one file each overwrites in turn.
        name = hashlib.sha256(f"{digest}:{json.dumps(tokens)}".encode()).hexdigest()
        return self.directory / f"{name}.safetensors"

    def holds(self, digest: str, tokens: list[int]) -> bool:
        return self.max_bytes > 0 and self._file(digest, tokens).is_file()

    def load(self, digest: str, tokens: list[int]) -> KV | None:
        """The K/V stored for `tokens` under `digest`, or None (none, unreadable, or
        holding other tokens: the file's own record is checked, not only its name)."""
        if self.max_bytes <= 0:
            return None
        file = self._file(digest, tokens)
        try:
            with safe_open(str(file), framework="pt") as entry:
                stored = json.loads((entry.metadata() or {}).get("tokens", "null"))
                if stored != tokens:
                    return None
                count = len(entry.keys()) // 2
                layers = [
                    (entry.get_tensor(f"k{i}"), entry.get_tensor(f"v{i}")) for i in range(count)
                ]
            os.utime(file)  # recently used: trimmed last
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, SafetensorError) as exc:
            log.warning("ignoring an unreadable prompt prefix %s: %s", file, exc)
            return None
        return layers

    def save(self, digest: str, tokens: list[int], layers: KV) -> None:
        """Write the entry atomically (a reader sees the whole file or none), then trim.
        A failure to write is logged and forgotten: the cache is an optimisation."""
        if self.max_bytes <= 0:
            return
        n = len(tokens)
        tensors = {}
        for i, (k, v) in enumerate(layers):
            tensors[f"k{i}"] = k[:, :, :n].contiguous()
            tensors[f"v{i}"] = v[:, :, :n].contiguous()
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            os.close(fd)
            try:
                save_file(tensors, tmp, metadata={"tokens": json.dumps(tokens)})
                os.replace(tmp, self._file(digest, tokens))
            finally:
                Path(tmp).unlink(missing_ok=True)
            self._trim()
        except OSError as exc:
            log.warning("could not keep the prompt prefix in %s: %s", self.directory, exc)

    def _trim(self) -> None:
        entries = []
        for file in self.directory.glob("*.safetensors"):
            try:
                stat = file.stat()
            except FileNotFoundError:  # trimmed by another process meanwhile
                continue
            entries.append((stat.st_mtime, stat.st_size, file))
        total = sum(size for _, size, _ in entries)
        for _, size, file in sorted(entries):
            if total <= self.max_bytes:
                break
            file.unlink(missing_ok=True)
            total -= size
