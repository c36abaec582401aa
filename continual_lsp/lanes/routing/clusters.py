"""Clusters of corrections that say the same thing: recurrence is what earns WEIGHTS.

Each correction is embedded (MiniLM, loaded once, lazily), compared by cosine with every
cluster centroid, and joins the nearest one at or above `Settings.cluster_threshold`;
otherwise it founds a new cluster. The centroid is the normalised running mean of its
members, stored as float32 bytes through `Store.upsert_cluster` (the store is the only
state: no lane keeps private files). The label is the shortest member seen, which for
rules is usually the crispest phrasing.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from continual_lsp.config import Settings
from continual_lsp.lanes.routing.embed import Embedder, get_embedder
from continual_lsp.store.db import Store, new_id

LABEL_MAX = 80


class ClusterAssignment(BaseModel):
    cluster_id: str
    count: int  # recurrence after this correction
    label: str
    is_new: bool
    similarity: float


def _label(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= LABEL_MAX else text[: LABEL_MAX - 1] + "…"


def centroid_of(row: dict) -> np.ndarray | None:
    blob = row.get("centroid")
    return None if not blob else np.frombuffer(blob, dtype=np.float32)


def nearest(store: Store, vec: np.ndarray) -> tuple[dict | None, float]:
    best, best_sim = None, -1.0
    for row in store.clusters():
        c = centroid_of(row)
        if c is None or c.shape != vec.shape:
            continue  # written by another embedder: not comparable
        sim = float(c @ vec / (np.linalg.norm(c) * np.linalg.norm(vec) + 1e-9))
        if sim > best_sim:
            best, best_sim = row, sim
    return best, best_sim


def assign_cluster(
    store: Store,
    text: str,
    settings: Settings | None = None,
    *,
    embedder: Embedder | None = None,
    increment: bool = True,
) -> ClusterAssignment:
    """Put `text` in its cluster (new or existing), bump the recurrence, persist."""
    settings = settings or Settings()
    vec = (embedder or get_embedder()).embed([text])[0].astype(np.float32)
    row, sim = nearest(store, vec)
    if row is not None and sim >= settings.cluster_threshold:
        n = int(row["count"])
        old = centroid_of(row)
        assert old is not None
        count = n + 1 if increment else max(n, 1)
        if increment:
            mean = (old * max(n, 1) + vec) / (max(n, 1) + 1)
            mean = mean / (np.linalg.norm(mean) + 1e-9)
        else:
            mean = old
        label = row["label"] if len(row["label"]) <= len(_label(text)) else _label(text)
        store.upsert_cluster(row["id"], label, mean.astype(np.float32).tobytes(), count)
        return ClusterAssignment(
            cluster_id=row["id"], count=count, label=label, is_new=False, similarity=sim
        )
    cluster_id = new_id("cl")
    store.upsert_cluster(cluster_id, _label(text), vec.tobytes(), 1)
    return ClusterAssignment(
        cluster_id=cluster_id, count=1, label=_label(text), is_new=True, similarity=max(sim, 0.0)
    )


def cluster_count(store: Store, cluster_id: str | None) -> int:
    if cluster_id is None:
        return 0
    for row in store.clusters():
        if row["id"] == cluster_id:
            return int(row["count"])
    return 0
