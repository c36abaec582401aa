"""Consolidation end to end on the embedded model (LocalPolicy): slow, marked `model`."""

from __future__ import annotations

from typing import Any

import pytest

from continual_lsp.config import Settings
from continual_lsp.lanes.context import bullets_for_turn
from continual_lsp.lanes.reading import Situation
from continual_lsp.lanes.routing.allocator import route_correction
from continual_lsp.learning.consolidate import consolidate
from continual_lsp.tools.base import ToolCall

pytestmark = [pytest.mark.model, pytest.mark.timeout(1200)]


@pytest.fixture(autouse=True)
def _two_probes(monkeypatch) -> None:
    # Half the drift probes: each probe costs two forward passes per evaluation on CPU.
    from continual_lsp.learning import consolidate as module

    monkeypatch.setattr(module, "DRIFT_PROBES", module.DRIFT_PROBES[:2])


PRINCIPLE = "Prefer edit_lines over rewriting a whole file with write."
TASKS = [
    "Fix the typo on line 3 of src/calc/ops.py",
    "Rename the variable total to result in src/calc/ops.py",
    "Change the return value on line 5 of src/calc/ops.py",
    "Fix the off-by-one on line 2 of src/calc/ops.py",
]


def _teach(store, embedder) -> str:
    settings = Settings(consolidation_depth=4)
    item = None
    for i, task in enumerate(TASKS):
        situation = Situation(
            task_text=task,
            tool="write",
            arguments={
                "path": "src/calc/ops.py",
                "content": "def add(a, b):\n    return a + b\n",
            },
            demonstration=ToolCall(
                tool="edit_lines",
                arguments={
                    "path": "src/calc/ops.py",
                    "start": i + 1,
                    "end": i + 1,
                    "content": "    return a + b",
                },
            ),
        )
        item = route_correction(
            store, PRINCIPLE, situation, settings, denial=True, embedder=embedder
        )
    assert item is not None and item.lane == "WEIGHTS"
    return item.cluster_id


@pytest.fixture
def local_policy(model_and_tokenizer, tmp_path) -> Any:
    local = pytest.importorskip("continual_lsp.policy.local.local_policy")
    settings = Settings(
        store_path=str(tmp_path / "s.sqlite3"), adapters_dir=str(tmp_path / "adapters")
    )
    return local.LocalPolicy(settings, model_and_tokenizer)


def test_consolidation_promotes_and_removes_the_bullet(store, embedder, local_policy) -> None:
    cluster = _teach(store, embedder)
    task = "Fix the typo on line 4 of src/calc/ops.py"
    before = bullets_for_turn(store, task, count=False)
    assert PRINCIPLE in before
    result = consolidate(
        local_policy,
        store,
        cluster,
        Settings(),
        steps=2,
        lr=2e-3,
        max_drift_increase=0.5,
        variations=0,
    )
    assert result.status == "promoted", (result.reason, result.metrics)
    assert result.candidate.compliance > result.incumbent.compliance
    after = bullets_for_turn(store, task, count=False)
    assert PRINCIPLE not in after and len(after) < len(before)
    assert store.adapters()[-1]["active"] == 1


def test_broken_candidate_is_discarded(store, embedder, local_policy) -> None:
    cluster = _teach(store, embedder)
    probe = local_policy.renderer.render_prompt([])
    tokens = local_policy.renderer.tokenize("hello")
    before = local_policy.logprobs(probe, tokens)
    # A learning rate this size wrecks the adapter: drift explodes, the gate must refuse.
    result = consolidate(local_policy, store, cluster, Settings(), steps=1, lr=5.0, variations=0)
    assert result.status == "discarded", (result.reason, result.metrics)
    after = local_policy.logprobs(probe, tokens)
    assert after == pytest.approx(before, abs=1e-4)  # the incumbent is back
    assert PRINCIPLE in bullets_for_turn(
        store, "Fix the typo on line 4 of src/calc/ops.py", count=False
    )
    assert store.adapters()[-1]["active"] == 0
