"""On the embedded model: a step that breaks the starter is undone, a normal one kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from continual_lsp.config import Settings
from continual_lsp.learning import worker
from continual_lsp.learning.anchors import gate_anchors, load_anchors, skill_cost
from continual_lsp.policy.local.local_policy import LocalPolicy
from continual_lsp.store import Store

from .test_worker import payload

pytestmark = pytest.mark.model


def test_the_gate_undoes_a_breaking_step_and_keeps_a_normal_one(
    policy: LocalPolicy, tmp_path: Path
) -> None:
    store = Store(tmp_path / "s.db")
    anchor = gate_anchors(load_anchors(Settings()))[0]
    before = policy.logprobs(anchor.prompt_tokens, anchor.completion_tokens)

    def step(lr: float) -> dict[str, object]:
        store.enqueue_job("sdpo", payload(policy, f"prop-{lr}"))
        job = store.claim_job(("sdpo",))
        assert job is not None
        settings = Settings(learning_rate=lr, adapters_dir=str(tmp_path / "adapters"))
        result = worker.run_job(policy, store, tmp_path / "adapters", settings, job)
        store.finish_job(job["id"], result)
        return result

    broken = step(0.3)  # three hundred times the default: the model forgets everything
    assert str(broken["skipped"]).startswith("undone")
    assert policy.logprobs(anchor.prompt_tokens, anchor.completion_tokens) == pytest.approx(
        before, abs=1e-4
    )
    assert store.adapters() == []
    kept = step(1e-3)
    assert "skipped" not in kept and kept["name"] == "v0001"
    cost = skill_cost(policy, Settings())
    assert cost is not None and cost < 0.1
    store.close()


def test_the_gate_scores_its_anchors_together_as_it_would_one_by_one(
    policy: LocalPolicy,
) -> None:
    """Packed after the system prompt they share, in one batch: the same losses."""
    from continual_lsp.learning.anchors import _loss, _packed_losses

    gate = gate_anchors(load_anchors(Settings()))
    assert len(gate) >= 6
    alone = [_loss(policy.logprobs(a.prompt_tokens, a.completion_tokens)) for a in gate]
    assert _packed_losses(policy, gate) == pytest.approx(alone, abs=1e-4)
