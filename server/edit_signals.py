"""Manual edits after a decision: a reviewer who changes, soon after, the lines a
proposal just wrote is telling the agent what it should have written (an edit signal)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pygls.uris import to_fs_path

from .lsp_text import line_edit, unified_diff
from .state import AppliedRegion

if TYPE_CHECKING:
    from .session import Session

DEBOUNCE_S = 1.0


def track(session: Session, uri: str, proposal_id: str, before: str, after: str) -> None:
    """Watch the lines a decision changed in `uri` for the reviewer's own changes."""
    change = line_edit(before, after)
    old = session.state.applied.pop(uri, None)
    if old and old.timer:
        old.timer.cancel()
    session.state.applied[uri] = AppliedRegion(
        proposal_id, after, change.start, max(change.new_end, change.start + 1)
    )


def on_change(session: Session, uri: str, changes: list[Any]) -> None:
    region = session.state.applied.get(uri)
    if region is None:
        return
    if time.monotonic() - region.at > session.settings.manual_edit_window_s:
        session.state.applied.pop(uri, None)
        return
    current = session.documents.text(uri)
    if current is None or current == region.content:
        return  # our own applyEdit, or an undo back to what was applied
    touched = False
    for change in changes:
        rng = getattr(change, "range", None)
        if rng is None or (rng.start.line < region.end and region.start <= rng.end.line):
            touched = True
    if not touched:
        return
    if region.timer:
        region.timer.cancel()
    # Debounced: one signal per burst of typing, carrying the whole difference.
    region.timer = session.loop.call_later(DEBOUNCE_S, lambda: session.spawn(_record(session, uri)))


async def flush(session: Session) -> None:
    """Record pending edit signals now (before the next decision, at shutdown), so the
    event log has them in the order the reviewer acted."""
    for uri, region in list(session.state.applied.items()):
        if region.timer is not None:
            region.timer.cancel()
            region.timer = None
            await _record(session, uri)


async def _record(session: Session, uri: str) -> None:
    region = session.state.applied.get(uri)
    current = session.documents.text(uri)
    if region is None or current is None or current == region.content:
        return
    name = Path(to_fs_path(uri) or uri).name
    diff = unified_diff(region.content, current, name, "applied", "reviewer")
    if diff == region.recorded:
        return
    region.recorded = diff
    agent = await session.agent()
    await session.call(agent.record_manual_edit, region.proposal_id, diff, current)
