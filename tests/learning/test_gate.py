"""What consolidation reads back from the weights lane's log, and the pure gate."""

from __future__ import annotations

from continual_lsp.config import Settings
from continual_lsp.lanes.reading import Situation
from continual_lsp.lanes.routing.allocator import route_correction
from continual_lsp.learning.gate import (
    EvalMetrics,
    cluster_demonstrations,
    gate,
    situations_for_cluster,
)
from continual_lsp.tools.base import ToolCall

# -- the gate, with numbers ---------------------------------------------------------------


def test_gate_promotes_a_better_candidate_within_drift() -> None:
    d = gate(EvalMetrics(compliance=-2.0, drift=0.01), EvalMetrics(compliance=1.5, drift=0.03))
    assert d.promote and "compliance" in d.reason


def test_gate_discards_no_gain() -> None:
    d = gate(EvalMetrics(compliance=1.0), EvalMetrics(compliance=1.0))
    assert not d.promote and "did not improve" in d.reason
    assert not gate(EvalMetrics(compliance=1.0), EvalMetrics(compliance=0.5)).promote
    assert not gate(EvalMetrics(compliance=1.0), EvalMetrics(compliance=1.2), min_gain=0.5).promote


def test_gate_discards_drift() -> None:
    d = gate(EvalMetrics(compliance=0.0, drift=0.0), EvalMetrics(compliance=5.0, drift=0.2))
    assert not d.promote and "drift" in d.reason
    assert gate(
        EvalMetrics(compliance=0.0, drift=0.0),
        EvalMetrics(compliance=5.0, drift=0.2),
        max_drift_increase=0.5,
    ).promote


def test_denials_borrow_the_calls_approved_after_their_cluster(store, embedder) -> None:
    """A denial carries no call of its own: what the reviewer approved after it (the
    retry) becomes the situation's compliant call and an example for later denials."""
    pnpm = ToolCall(tool="bash", arguments={"cmd": "pnpm add zod"})
    routed = []
    for i, (pid, text) in enumerate(
        [("p1", "Use pnpm here, not npm."), ("p2", "This project uses pnpm; never npm.")]
    ):
        situation = Situation(
            proposal_id=pid,
            task_text=f"Add package {i}",
            tool="bash",
            arguments={"cmd": f"npm install pkg{i}"},
        )
        routed.append(
            route_correction(store, text, situation, Settings(), denial=True, embedder=embedder)
        )
    assert routed[0] is not None and routed[1] is not None
    cluster = routed[0].cluster_id
    assert routed[1].cluster_id == cluster
    assert cluster_demonstrations(store, cluster) == []  # nothing approved yet
    store.enqueue_job(
        "sdpo",
        {"proposal_id": "p1", "signal": "approved_retry", "demonstration": pnpm.model_dump()},
    )
    assert cluster_demonstrations(store, cluster) == [pnpm]
    assert cluster_demonstrations(store, cluster, exclude="p1") == []  # not its own retry
    compliant = {
        s.task: s.compliant for s in situations_for_cluster(store, cluster) if s.origin == "log"
    }
    assert compliant == {"Add package 0": pnpm, "Add package 1": None}
