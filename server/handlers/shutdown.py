"""shutdown: stop this connection's watcher and background work; `exit` then closes the
connection (the transport loop handles it)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp

if TYPE_CHECKING:
    from ..app import ContinualServer


def register(ls: ContinualServer) -> None:
    @ls.feature(lsp.SHUTDOWN)
    async def shutdown(ls: ContinualServer, *args: Any) -> None:
        with contextlib.suppress(Exception):
            await ls.session.flush_manual_edits()
        ls.session.close()
