"""The worker hands `sdpo_step` the earlier jobs of the same cluster when replay is on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from continual_lsp.config import Settings
from continual_lsp.learning import worker
from continual_lsp.policy.base import TrainMetrics
from continual_lsp.store import Store


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings) -> list[str]:
    store = Store(tmp_path / "s.db")
    seen: list[str] = []

    def fake_step(
        policy: Any, payload: Any, settings: Any, replay: Any = (), anchors: Any = ()
    ) -> TrainMetrics:
        seen.extend(job.proposal_id for job in replay)
        return TrainMetrics(loss=0.0)

    monkeypatch.setattr(worker, "sync_weights", lambda policy, store: None)
    monkeypatch.setattr("continual_lsp.learning.sdpo.sdpo_step", fake_step)
    for name, cluster in (("a", "c1"), ("b", "c2"), ("c", "c1"), ("new", "c1")):
        store.enqueue_job(
            "sdpo",
            {"proposal_id": name, "prompt_tokens": [1], "correction": "x", "cluster": cluster},
        )
        job = store.claim_job(("sdpo",))
        assert job is not None
        # The anchor gate scores with the model, which this fake policy does not have.
        settings_now = settings.model_copy(update={"save_every": 1000, "anchor_gate_nats": None})
        result = worker.run_job(object(), store, tmp_path / "adapters", settings_now, job)  # type: ignore[arg-type]
        store.finish_job(job["id"], result)
    store.close()
    return seen


def test_replay_off_sends_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(tmp_path, monkeypatch, Settings()) == []


def test_replay_sends_the_clusters_earlier_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "c" got "a"; "new" got "c" then "a" (newest first); "b" is another cluster.
    assert _run(tmp_path, monkeypatch, Settings(replay_same_cluster=2)) == ["a", "c", "a"]
