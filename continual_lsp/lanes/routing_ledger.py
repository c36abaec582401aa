"""The ledger: where every correction went, with its recurrence; revert for bullets and guards.

Adapter versions are reverted by the agent (it owns the policy that must reload weights);
`revert` recognises their ids and raises `AdapterRevertNeeded` so the agent can do it,
and `LedgerError` for ids it does not know at all.
"""

from __future__ import annotations

from continual_lsp.protocol import LedgerItem, LedgerResult
from continual_lsp.store.db import Store


class LedgerError(LookupError):
    """An id the ledger cannot revert; the message says why."""


class AdapterRevertNeeded(LedgerError):
    """The id names an adapter version: the agent must swap the policy's weights."""

    def __init__(self, version: int, name: str) -> None:
        super().__init__(f"{name!r} is adapter version {version}: revert it through the agent")
        self.version = version
        self.name = name


def build_ledger(store: Store) -> LedgerResult:
    counts = {c["id"]: int(c["count"]) for c in store.clusters()}
    items = [
        LedgerItem(
            id=row["id"],
            text=row["text"],
            lane=row["lane"],
            reason=row["reason"],
            recurrence=max(1, counts.get(row["cluster_id"] or "", 1)),
            created_at=float(row["created_at"]),
            active=bool(row["active"]),
        )
        for row in store.lane_items()
    ]
    return LedgerResult(
        items=items,
        context_tokens=int(store.counter("context_tokens")),
        notes_only_tokens=int(store.counter("notes_only_tokens")),
    )


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
