"""Weights lane: the situations a recurring principle was corrected in, and the queue.

Flow:
1. Every routed correction leaves a `lane_situation` event (cluster, task text, the
   corrected call, the demonstration when there is one): the raw material.
2. When a cluster is WEIGHTS and has gathered `Settings.consolidation_depth` situations
   since its last consolidation, a `consolidate` job is queued (depth, not clock).
3. The training worker runs it (`continual_lsp.learning.consolidate`), reading the events
   back through `continual_lsp.learning.gate` and promoting a candidate only past
   the gate there. The store's events are the whole interface: the lane never imports
   learning, learning never imports the lane.
"""

from __future__ import annotations

from typing import Any

from continual_lsp.config import Settings
from continual_lsp.lanes.reading import Situation
from continual_lsp.store.db import Store

JOB_KIND = "consolidate"


def record_situation(store: Store, cluster_id: str, item_id: str, situation: Situation) -> None:
    """Log where a correction happened (no new text beyond what the log already holds).

    The payload's keys are what `learning.gate` reads back; a field not given is left out.
    """
    demonstration = situation.demonstration
    payload: dict[str, Any] = {"clusterId": cluster_id, "itemId": item_id}
    for key, value in (
        ("task_text", situation.task_text),
        ("tool", situation.tool),
        ("arguments", situation.arguments),
        ("demonstration", demonstration.model_dump() if demonstration is not None else None),
    ):
        if value is not None:
            payload[key] = value
    store.append_event("lane_situation", payload, proposal_id=situation.proposal_id)


def pending_situations(store: Store, cluster_id: str) -> int:
    """Situations logged since this cluster's last consolidation."""
    last = 0.0
    for ev in store.events(kind="consolidation", cluster_id=cluster_id):
        last = max(last, float(ev["ts"]))
    return sum(
        1
        for ev in store.events(kind="lane_situation", cluster_id=cluster_id)
        if float(ev["ts"]) > last
    )


def _job_pending(store: Store, cluster_id: str) -> bool:
    for ev in store.events(kind="consolidate_queued", cluster_id=cluster_id):
        job = store.job(int(ev["payload"]["jobId"]))
        if job is not None and job["status"] in ("pending", "running"):
            return True
    return False


def on_weights_decision(store: Store, item: Any, text: str, settings: Settings) -> int | None:
    """Called by the allocator for a WEIGHTS item; queues consolidation by depth."""
    cluster_id = item.cluster_id
    if cluster_id is None:
        return None
    if pending_situations(store, cluster_id) < settings.consolidation_depth:
        return None
    if _job_pending(store, cluster_id):
        return None
    job_id = store.enqueue_job(JOB_KIND, {"clusterId": cluster_id, "itemId": item.id})
    store.append_event("consolidate_queued", {"clusterId": cluster_id, "jobId": job_id})
    return job_id
