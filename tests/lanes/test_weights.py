"""Weights lane: the situation log and the depth queue (what learning reads back is tested
in tests/learning/test_situations.py, consolidation in tests/learning/test_consolidate.py)."""

from __future__ import annotations

from continual_lsp.lanes.weights import pending_situations
from continual_lsp.learning.gate import situations_for_cluster
from tests.lanes.support import teach_cluster


def test_situations_and_the_depth_queue(store, embedder) -> None:
    cluster = teach_cluster(store, embedder, n=4)
    assert pending_situations(store, cluster) == 4
    situations = situations_for_cluster(store, cluster)
    assert len([s for s in situations if s.origin == "log"]) == 4
    assert len([s for s in situations if s.origin == "synth"]) == 8
    jobs = [store.job(e["payload"]["jobId"]) for e in store.events(kind="job_queued")]
    assert [j["kind"] for j in jobs] == ["consolidate"]
    assert jobs[0]["payload"]["clusterId"] == cluster
