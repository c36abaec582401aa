"""Consolidation against a tiny deterministic fake policy (the real-model test is in
test_consolidate_local)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from continual_lsp.config import Settings
from continual_lsp.lanes.context import bullets_for_turn
from continual_lsp.lanes.routing.allocator import route_correction
from continual_lsp.lanes.weights import pending_situations
from continual_lsp.learning.consolidate import consolidate
from continual_lsp.policy.base import AdapterInfo, Completion, Datum, Message, TrainMetrics
from continual_lsp.tools.base import ToolCall
from tests.lanes.support import PRINCIPLE, teach_cluster

# -- a fake policy: logprob of a completion = its learned preference ----------------------


class _Renderer:
    def render_prompt(self, messages: list[Message]) -> list[int]:
        return [ord(c) % 251 for c in "\n".join(m.content for m in messages)][:200] or [1]

    def render_call(self, call: ToolCall) -> list[int]:
        text = json.dumps(call.model_dump(), sort_keys=True)
        return [hash(text) % 9973, 7, 7]

    def parse_call(self, text: str) -> ToolCall:
        return ToolCall.model_validate_json(text)


class FakePolicy:
    """Each completion's total logprob is -6 + pref[completion] (+ noise when broken)."""

    backend = "fake"
    model_name = "fake"
    manages_versions = False

    def __init__(self, broken: bool = False) -> None:
        self.pref: dict[tuple[int, ...], float] = {}
        self.versions: dict[str, dict[tuple[int, ...], float]] = {}
        self.broken = broken
        self.shift = 0.0
        self._version: str | None = None

    @property
    def renderer(self) -> _Renderer:
        return _Renderer()

    @property
    def adapter_version(self) -> str | None:
        return self._version

    @adapter_version.setter
    def adapter_version(self, v: str | None) -> None:
        self._version = v

    def logit_scorer(self) -> None:
        return None

    def sample(self, prompt_tokens: list[int], params: Any) -> Completion:
        raise ValueError("no sampling in the fake")

    def logprobs(self, prompt_tokens: list[int], completion_tokens: list[int]) -> list[float]:
        total = -6.0 + self.pref.get(tuple(completion_tokens), 0.0) - self.shift
        return [total / len(completion_tokens)] * len(completion_tokens)

    def reference_logprobs(
        self, prompt_tokens: list[int], completion_tokens: list[int]
    ) -> list[float]:
        return [-6.0 / len(completion_tokens)] * len(completion_tokens)

    def train_step(self, batch: list[Datum], loss: str, lr: float, **options: Any) -> TrainMetrics:
        for d in batch:
            key = tuple(d.completion_tokens)
            self.pref[key] = self.pref.get(key, 0.0) + 0.5
        if self.broken:
            self.shift += 1.0  # everything, the probes included, gets less likely: drift
            for key in list(self.pref):
                self.pref[key] -= 2.0
        return TrainMetrics(loss=1.0)

    def save_adapter(self, name: str) -> AdapterInfo:
        self.versions[name] = (dict(self.pref), self.shift)  # type: ignore[assignment]
        self._version = name
        return AdapterInfo(name=name, path=name, sha256="0" * 64)

    def load_adapter(self, name: str) -> None:
        pref, shift = self.versions[name]  # type: ignore[misc]
        self.pref, self.shift = dict(pref), shift
        self._version = name


def test_consolidate_promotes_and_the_bullet_leaves(store, embedder) -> None:
    cluster = teach_cluster(store, embedder)
    task = "Fix the typo in ops.py using edit_lines"
    before = bullets_for_turn(store, task, count=False)
    assert PRINCIPLE in before
    result = consolidate(FakePolicy(), store, cluster, Settings())
    assert result.status == "promoted", result.reason
    assert result.candidate.compliance > result.incumbent.compliance
    after = bullets_for_turn(store, task, count=False)
    assert PRINCIPLE not in after and len(after) < len(before)
    item = next(i for i in store.lane_items(lane="WEIGHTS"))
    assert item["spec"]["promoted"] == result.adapter and item["active"] == 1
    adapters = store.adapters()
    assert adapters[-1]["name"] == result.adapter and adapters[-1]["active"] == 1
    assert adapters[-1]["source"] == "consolidation"
    assert pending_situations(store, cluster) == 0


def test_consolidate_discards_a_broken_candidate(store, embedder) -> None:
    cluster = teach_cluster(store, embedder)
    policy = FakePolicy(broken=True)
    result = consolidate(policy, store, cluster, Settings())
    assert result.status == "discarded"
    # The incumbent is back, the broken version is kept (inactive), the bullet stays.
    assert policy.shift == 0.0 and policy.pref == {}
    assert store.adapters()[-1]["active"] == 0
    assert PRINCIPLE in bullets_for_turn(store, "Fix the typo in ops.py", count=False)


def test_consolidate_skips_without_situations(store, embedder) -> None:
    item = route_correction(
        store, PRINCIPLE, None, Settings(weights_recurrence=1), denial=True, embedder=embedder
    )
    assert item.lane == "WEIGHTS"
    assert consolidate(FakePolicy(), store, item.cluster_id, Settings()).status == "skipped"


@pytest.mark.parametrize("bad", ["nope"])
def test_consolidate_unknown_cluster(store, bad: str) -> None:
    assert consolidate(FakePolicy(), store, bad, Settings()).status == "skipped"
