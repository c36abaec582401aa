"""The worker undoes a step that cost the starter's skills (the held-out anchors' gate)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from continual_lsp.config import Settings
from continual_lsp.learning import worker
from continual_lsp.learning.anchors import gate_anchors, load_anchors, rehearsed_anchors
from continual_lsp.policy.base import TrainMetrics
from continual_lsp.store import Store


class Drifted:
    """Logprobs `drop` nats per token under the reference's; records what it loads."""

    manages_versions = False
    adapter_version: str | None = None

    def __init__(self, drop: float) -> None:
        self.drop = drop
        self.loaded: list[str] = []

    def reference_logprobs(self, prompt: list[int], completion: list[int]) -> list[float]:
        return [-0.1] * len(completion)

    def logprobs(self, prompt: list[int], completion: list[int]) -> list[float]:
        return [-0.1 - self.drop] * len(completion)

    def logprobs_batch(self, prompt: list[int], completions: list[list[int]]) -> list[list[float]]:
        return [self.logprobs(prompt, c) for c in completions]

    def load_adapter(self, name: str) -> None:
        self.loaded.append(name)


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: Drifted) -> dict[str, Any]:
    """One job through `run_job`; no version is saved (`save_every`), so no model is needed."""
    monkeypatch.setattr(worker, "sync_weights", lambda policy, store: None)
    monkeypatch.setattr(
        "continual_lsp.learning.sdpo.sdpo_step", lambda *a, **k: TrainMetrics(loss=1.0)
    )
    store = Store(tmp_path / "s.db")
    store.enqueue_job("sdpo", {"proposal_id": "p", "prompt_tokens": [1], "correction": "x"})
    job = store.claim_job(("sdpo",))
    assert job is not None
    result = worker.run_job(policy, store, tmp_path / "adapters", Settings(save_every=1000), job)  # type: ignore[arg-type]
    result["steps_counted"] = store.counter(worker.STEP_COUNTER)
    store.close()
    return result


def test_a_step_that_costs_the_anchors_is_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = Drifted(drop=0.3)
    result = _run(tmp_path, monkeypatch, policy)
    assert result["skipped"].startswith("undone: the step raised")
    assert "0.300 nats" in result["skipped"]
    assert policy.loaded == [""]  # back to what the registry serves: no version yet
    assert result["steps_counted"] == 0


def test_a_step_within_the_limit_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = Drifted(drop=0.05)
    result = _run(tmp_path, monkeypatch, policy)
    assert "skipped" not in result and policy.loaded == []
    assert result["steps_counted"] == 1


def test_the_gate_anchors_are_held_out_of_the_rehearsal() -> None:
    pool = load_anchors(Settings())
    gate, rehearsed = gate_anchors(pool), rehearsed_anchors(pool)
    assert len(gate) == 8 and len(gate) + len(rehearsed) == len(pool)
    assert not {tuple(a.prompt_tokens) for a in gate} & {tuple(a.prompt_tokens) for a in rehearsed}
