"""The ledger: where every correction went, with its recurrence; revert for bullets and
guards; promote for a task-scoped correction (`scope.py`) the reviewer wants kept.

Adapter versions are reverted by the agent (it owns the policy that must reload weights);
`revert` recognises their ids and raises `AdapterRevertNeeded` so the agent can do it,
and `LedgerError` for ids it does not know at all.
"""

from __future__ import annotations

from typing import Any

from continual_lsp.config import Settings
from continual_lsp.lanes.reading import Situation
from continual_lsp.lanes.routing.allocator import LaneItem, route_correction
from continual_lsp.lanes.scope import TASK_KIND
from continual_lsp.protocol import GateCompliance, LedgerItem, LedgerResult
from continual_lsp.store.db import Store


class LedgerError(LookupError):
    """An id the ledger cannot revert; the message says why."""


class AdapterRevertNeeded(LedgerError):
    """The id names an adapter version: the agent must swap the policy's weights."""

    def __init__(self, version: int, name: str) -> None:
        super().__init__(f"{name!r} is adapter version {version}: revert it through the agent")
        self.version = version  # the caller needs only the version to revert


def build_ledger(store: Store) -> LedgerResult:
    counts = {c["id"]: int(c["count"]) for c in store.clusters()}
    corrections = store.events("correction_clustered")
    items = [
        LedgerItem(
            id=row["id"],
            text=row["text"],
            lane=row["lane"],
            reason=row["reason"],
            recurrence=max(1, counts.get(row["cluster_id"] or "", 1)),
            created_at=float(row["created_at"]),
            active=bool(row["active"]),
            fired=int(store.counter(f"fired:{row['id']}")),
            recurred_after=_recurred_after(row, corrections),
            gate=_gate(store, row),
            approvals=(row["spec"].get("allow") or {}).get("approvals")
            if row.get("kind") == "allow"
            else None,
            overridden=_overridden(store, row),
            task_scoped=True if row.get("kind") == TASK_KIND else None,
        )
        for row in store.lane_items()
    ]
    return LedgerResult(
        items=items,
        context_tokens=int(store.counter("context_tokens")),
        notes_only_tokens=int(store.counter("notes_only_tokens")),
    )


def _overridden(store: Store, row: dict[str, Any]) -> int | None:
    """A guard's overrides (also once it retired for them); None for other items."""
    count = int(store.counter(f"overridden:{row['id']}"))
    is_guard = row["lane"] == "CODE" and (row["spec"] or {}).get("rules")
    return count if count or is_guard else None


def _recurred_after(row: dict[str, Any], events: list[dict[str, Any]]) -> int:
    """Corrections routed to the item, or filed in its cluster, after it existed: its
    mistake came back although the lesson was in place."""
    return sum(
        1
        for e in events
        if e["ts"] > row["created_at"]
        and not (e["payload"].get("created") and e["payload"].get("itemId") == row["id"])
        and (
            e["payload"].get("itemId") == row["id"]
            or (row.get("cluster_id") and e["payload"].get("clusterId") == row["cluster_id"])
        )
    )


def _gate(store: Store, row: dict[str, Any]) -> GateCompliance | None:
    """A WEIGHTS item's latest consolidation: held-out compliance before and after."""
    if row["lane"] != "WEIGHTS" or not row.get("cluster_id"):
        return None
    runs = [
        a
        for a in store.adapters()
        if a["source"] == "consolidation" and a["metrics"].get("clusterId") == row["cluster_id"]
    ]
    if not runs:
        return None
    metrics = runs[-1]["metrics"]
    return GateCompliance(
        before=float(metrics["incumbent"]["compliance"]),
        after=float(metrics["candidate"]["compliance"]),
        promoted=row["spec"].get("promoted") == runs[-1]["name"],
    )


def promote(store: Store, item_id: str, settings: Settings | None = None) -> LaneItem:
    """Make a task-scoped correction a standing one: its text is routed again through the
    lanes (with the corrected call it was made on) and may become a guard, a bullet or
    a WEIGHTS item; the task item is deactivated and names what it became."""
    row = store.lane_item(item_id)
    if row is None or row.get("kind") != TASK_KIND:
        raise LedgerError(f"{item_id!r} is not a task-scoped correction")
    task = dict((row["spec"] or {}).get("task") or {})
    if task.get("promoted_to"):
        raise LedgerError(f"{item_id!r} was already promoted to {task['promoted_to']!r}")
    item = route_correction(
        store,
        row["text"],
        Situation.model_validate(task.get("context") or {}),
        settings,
        denial=True,
        source=row.get("source"),
        standing=True,
    )
    assert item is not None  # a denial is a correction by construction
    task["promoted_to"] = item.id
    store.update_lane_item(
        item_id,
        active=False,
        spec={**row["spec"], "task": task},
        reason=f"{row['reason']} Promoted by the reviewer: now {item.lane} ({item.id}).",
    )
    store.append_event("promote", {"itemId": item_id, "to": item.id, "lane": item.lane})
    return item


def revert(store: Store, item_id: str) -> str:
    """Deactivate a bullet or a guard (or a WEIGHTS item's pending bullet). Returns its lane.

    A WEIGHTS item that was already consolidated stays in the adapter: reverting the item
    stops its bullet and any further consolidation, and the agent is told which adapter
    carries it (`AdapterRevertNeeded`) when the caller passes the adapter's id instead.
    """
    row = store.lane_item(item_id)
    if row is not None:
        store.update_lane_item(item_id, active=False)
        store.append_event("revert", {"itemId": item_id, "lane": row["lane"]})
        return str(row["lane"])
    for adapter in store.adapters():
        if item_id in (adapter["name"], f"adapter-{adapter['version']}", str(adapter["version"])):
            raise AdapterRevertNeeded(int(adapter["version"]), str(adapter["name"]))
    raise LedgerError(f"no lane item or adapter version with id {item_id!r}")
