"""Small logistic-regression heads over [MiniLM embedding, handcrafted features].

Three heads, each a weight vector + bias:
- `correction`: a standing rule/correction (any lane) vs an ordinary request;
- `checkable`: among corrections, CODE vs not (used when the compiler found no spec);
- `behavioural`: among non-CODE corrections, a how-to-work judgement (WEIGHTS) vs a
  fact about the project (CONTEXT).

They are trained by `bench/allocator.py --export` on the hand-labelled dev file and
shipped as numbers in the package data file `continual_lsp/data/router_heads.json` (no
correction text ships with them). With no such file, or without the MiniLM package (other
embedding size), callers use the rules alone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from importlib import resources

import numpy as np

from continual_lsp.lanes.features import FEATURE_NAMES
from continual_lsp.lanes.reading import read
from continual_lsp.lanes.routing.embed import Embedder, get_embedder

log = logging.getLogger(__name__)

HEADS = ("correction", "checkable", "behavioural")
HEADS_FILE = "data/router_heads.json"  # inside the package, read with importlib.resources


def featurize(texts: Sequence[str], embedder: Embedder | None = None) -> np.ndarray:
    emb = (embedder or get_embedder()).embed(list(texts))
    hand = (
        np.stack([read(t).features for t in texts])
        if texts
        else np.zeros((0, len(FEATURE_NAMES)), np.float32)
    )
    return np.concatenate([emb, hand], axis=1).astype(np.float32)


def train_logreg(
    x: np.ndarray, y: np.ndarray, l2: float = 0.1, steps: int = 2000, lr: float = 0.5
) -> tuple[np.ndarray, float]:
    """Class-balanced L2 logistic regression by full-batch gradient descent (tiny data).

    Trained close to convergence: 400 steps at l2 1.0 left the behavioural head at 0.77
    repository-grouped accuracy, 2000 at 0.1 reach 0.80 (bench/allocator.py)."""
    n, d = x.shape
    w = np.zeros(d, dtype=np.float64)
    b = 0.0
    pos = max(float(y.sum()), 1.0)
    neg = max(float(n - y.sum()), 1.0)
    sw = np.where(y > 0.5, n / (2 * pos), n / (2 * neg))
    for _ in range(steps):
        z = x @ w + b
        p = 1.0 / (1.0 + np.exp(-z))
        g = (p - y) * sw
        w -= lr * (x.T @ g / n + l2 * w / n)
        b -= lr * float(g.mean())
    return w.astype(np.float32), float(b)


def predict(x: np.ndarray, head: tuple[np.ndarray, float]) -> np.ndarray:
    w, b = head
    return 1.0 / (1.0 + np.exp(-(x @ w + b)))


class Heads:
    def __init__(self, heads: dict[str, tuple[np.ndarray, float]]) -> None:
        self.heads = heads

    @property
    def dim(self) -> int:
        return int(next(iter(self.heads.values()))[0].shape[0])

    def prob(self, head: str, x: np.ndarray) -> np.ndarray:
        return predict(x, self.heads[head])

    @classmethod
    def fit(cls, x: np.ndarray, labels: Sequence[str], l2: float = 0.1) -> Heads:
        lanes = np.asarray(labels)
        heads: dict[str, tuple[np.ndarray, float]] = {}
        heads["correction"] = train_logreg(x, (lanes != "NONE").astype(float), l2)
        corr = lanes != "NONE"
        heads["checkable"] = train_logreg(x[corr], (lanes[corr] == "CODE").astype(float), l2)
        nc = (lanes != "NONE") & (lanes != "CODE")
        heads["behavioural"] = train_logreg(x[nc], (lanes[nc] == "WEIGHTS").astype(float), l2)
        return cls(heads)

    def to_json(self) -> str:
        """The data file's text: per head a weight vector and a bias, numbers only."""
        heads = {
            name: {"w": [float(f"{v:.5g}") for v in w.tolist()], "b": float(f"{b:.6g}")}
            for name, (w, b) in self.heads.items()
        }
        return json.dumps({"format": 1, "dim": self.dim, "heads": heads}) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Heads:
        data = json.loads(text)
        if data.get("format") != 1 or set(data.get("heads", {})) != set(HEADS):
            raise ValueError("not a router heads file of format 1")
        heads = {
            name: (np.asarray(h["w"], dtype=np.float32), float(h["b"]))
            for name, h in data["heads"].items()
        }
        return cls(heads)


_cached: Heads | None = None
_loaded = False


def shipped_heads() -> Heads | None:
    """The exported heads, or None (no file, or an embedder of another size)."""
    global _cached, _loaded
    if _loaded:
        return _cached
    _loaded = True
    source = resources.files("continual_lsp").joinpath(HEADS_FILE)
    try:
        _cached = Heads.from_json(source.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        log.warning(
            "router heads file %s is unreadable, using the rules alone: %s", HEADS_FILE, exc
        )
        return None
    return _cached


def set_heads(heads: Heads | None) -> None:
    """Benches and tests inject fold-trained heads (None: back to the shipped ones)."""
    global _cached, _loaded
    _cached = heads
    _loaded = heads is not None
