"""Files changed on disk outside the editor: a proposal computed on the old content must
never be applied over the new one."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from pygls.exceptions import JsonRpcException
from watchfiles import DefaultFilter, awatch

from . import proposals

if TYPE_CHECKING:
    from .session import Session


async def watch(session: Session) -> None:
    """Until the session closes, check pending proposals against every change on disk."""
    assert session.workspace is not None
    root = session.workspace
    try:
        async for changes in awatch(
            root,
            stop_event=session.stopped,
            watch_filter=DefaultFilter(),
            debounce=300,
            step=50,
            recursive=True,
            ignore_permission_denied=True,
        ):
            rels = set()
            for _, raw in changes:
                with contextlib.suppress(ValueError):
                    rels.add(Path(raw).resolve().relative_to(root).as_posix())
            await on_disk_change(session, rels)
    except (FileNotFoundError, RuntimeError) as exc:
        session.log_error(f"not watching {root} for changes: {exc}")


async def on_disk_change(session: Session, rel_paths: set[str]) -> None:
    touched = session.state.touching(rel_paths)
    if not touched:
        return
    agent = await session.agent()
    for rel in sorted(touched):
        try:
            stale = await session.call(agent.invalidate_path, rel)
        except JsonRpcException as exc:
            session.log_error(f"checking {rel} after a change on disk failed: {exc.message}")
            continue
        for pid in stale:
            proposals.forget(session, pid)
            session.show_message(
                f"Proposal {pid} is stale: {rel} changed on disk, so it will not be applied.",
                warn=True,
            )
