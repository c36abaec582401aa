"""What the reviewer's accepted calls say about a guard (DESIGN §5).

- An override (the reviewer ran a call the guard blocked) counts against the guard; a
  guard overridden `OVERRIDES_TO_RETIRE` times retires to CONTEXT: it stays as a cued
  bullet, no longer a block.
- A guard compiled from a denial must let the reviewer's own fix through: checked against
  the calls the reviewer accepts next in that task (an approved retry, an edit's
  arguments, an approved hunk, an override), a guard that would block one is narrowed
  (its rules that block the call are dropped, the others kept) or, when every rule
  blocks it, dropped to CONTEXT.

Each change is one `RoutedNotification` for the reviewer and the reason the ledger shows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from continual_lsp.lanes.guards.guard_set import Guard
from continual_lsp.lanes.guards.spec import GuardSpec, Rule, rule_summary
from continual_lsp.protocol import RoutedNotification
from continual_lsp.store import Store
from continual_lsp.tools.base import Preview, ToolCall

log = logging.getLogger(__name__)

OVERRIDES_TO_RETIRE = 2


def overridden(store: Store, guard_id: str) -> int:
    """Times the reviewer overrode the guard."""
    return int(store.counter(f"overridden:{guard_id}"))


def record_override(store: Store, guard_id: str, proposal_id: str) -> RoutedNotification | None:
    """Count an override against `guard_id`: a sign the guard was wrong. At the
    `OVERRIDES_TO_RETIRE`-th the guard retires to CONTEXT; that change is returned."""
    store.bump(f"overridden:{guard_id}")
    count = overridden(store, guard_id)
    store.append_event(
        "guard_overridden", {"itemId": guard_id, "proposalId": proposal_id, "count": count}
    )
    row = store.lane_item(guard_id)
    if row is None or row["lane"] != "CODE" or not row["active"]:
        return None
    if count < OVERRIDES_TO_RETIRE:
        return None
    reason = (
        f"Retired to CONTEXT: the reviewer overrode this guard {count} times, so it blocked "
        "calls they wanted; kept as a bullet shown when its cue matches, no longer a block."
    )
    store.update_lane_item(guard_id, lane="CONTEXT", reason=reason)
    store.append_event("guard_retired", {"itemId": guard_id, "overridden": count})
    return RoutedNotification(item_id=guard_id, lane="CONTEXT", reason=reason)


def _blocks(
    guard_id: str,
    spec: GuardSpec,
    rules: list[Rule],
    call: ToolCall,
    preview: Preview | None,
    history: Sequence[ToolCall],
) -> bool:
    try:
        verdict = Guard(guard_id, spec.model_copy(update={"rules": rules})).check(
            call, preview, history
        )
    except Exception as exc:  # a guard that fails runs open (GuardSet does the same)
        log.warning("guard %s failed on an accepted call: %s", guard_id, exc)
        return False
    return verdict.action == "block"


def let_through(
    store: Store,
    guard_ids: Sequence[str],
    call: ToolCall,
    preview: Preview | None,
    history: Sequence[ToolCall] = (),
    what: str = "",
) -> list[RoutedNotification]:
    """Narrow or drop each guard of `guard_ids` (those compiled from denials in the task)
    that would block `call`, the call the reviewer accepted; `preview` is its preview
    against the files as they were before it ran. `what` names the call for the reason."""
    changed: list[RoutedNotification] = []
    accepted = f" ({what})" if what else ""
    for guard_id in guard_ids:
        row = store.lane_item(guard_id)
        if row is None or row["lane"] != "CODE" or not row["active"]:
            continue
        try:
            spec = GuardSpec.model_validate(row["spec"] or {})
        except ValueError:
            continue
        if not spec.rules or not _blocks(guard_id, spec, spec.rules, call, preview, history):
            continue
        kept = [r for r in spec.rules if not _blocks(guard_id, spec, [r], call, preview, history)]
        dropped = [rule_summary(r) for r in spec.rules if r not in kept]
        fields: dict[str, Any]
        # A set of rules each letting the call through may still block it together
        # (a rewrite feeding a block): narrowing must leave a guard that lets it through.
        if kept and not _blocks(guard_id, spec, kept, call, preview, history):
            lane = "CODE"
            reason = (
                f"Narrowed: {'; '.join(dropped)} would block the call the reviewer accepted "
                f"in this task{accepted}, so that part was dropped; the guard keeps "
                f"{'; '.join(rule_summary(r) for r in kept)}."
            )
            fields = {"spec": spec.model_copy(update={"rules": kept}).model_dump()}
        else:
            lane = "CONTEXT"
            reason = (
                f"Dropped to CONTEXT: as a guard ({'; '.join(dropped)}) it would block the "
                f"call the reviewer accepted in this task{accepted}; kept as a bullet shown "
                "when its cue matches."
            )
            fields = {"lane": "CONTEXT"}
        store.update_lane_item(guard_id, reason=reason, **fields)
        store.append_event(
            "guard_let_through",
            {"itemId": guard_id, "lane": lane, "dropped": dropped, "call": call.model_dump()},
        )
        changed.append(RoutedNotification(item_id=guard_id, lane=lane, reason=reason))
    return changed
