"""shutdown: stop this connection's watcher and background work; `exit` then closes the
connection (the transport loop handles it)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp

from .. import edit_signals

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from ..connection import Connection


def register(ls: LanguageServer) -> None:
    @ls.feature(lsp.SHUTDOWN)
    async def shutdown(ls: Connection, *args: Any) -> None:
        with contextlib.suppress(Exception):
            await edit_signals.flush(ls.session)
        ls.session.close()
