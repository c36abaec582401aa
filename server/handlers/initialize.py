"""initialize / initialized: pick the workspace, learn what the client can render, and
start the agent (and its model) while the client finishes its handshake."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams
from pygls.uris import to_fs_path

from .. import watcher
from ..state import ClientCapabilities

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from ..connection import Connection


def workspace_root(params: lsp.InitializeParams) -> Path | None:
    uri = None
    if params.workspace_folders:
        uri = params.workspace_folders[0].uri
    elif params.root_uri:
        uri = params.root_uri
    if uri is not None:
        path = to_fs_path(uri)
        return Path(path) if path else None
    return Path(params.root_path) if params.root_path else None


def register(ls: LanguageServer) -> None:
    @ls.feature(lsp.INITIALIZE)
    async def initialize(ls: Connection, params: lsp.InitializeParams) -> None:
        session = ls.session
        root = workspace_root(params) or session.default_workspace
        if root is None:
            raise JsonRpcInvalidParams(
                message="initialize: no workspace; send rootUri or workspaceFolders"
            )
        # The roots first: a folder outside them is refused without saying whether it
        # exists (another user's folder on a team server).
        if not session.settings.allows_workspace(root):
            raise JsonRpcInvalidParams(
                message=f"initialize: workspace {root} is outside the workspace roots this "
                f"connection may open ({', '.join(session.settings.workspace_roots)}; "
                "symlinks are resolved); nothing was opened"
            )
        if not root.is_dir():
            raise JsonRpcInvalidParams(message=f"initialize: workspace {root} is not a directory")
        session.attach(root, ClientCapabilities.resolve(params))
        session.spawn(watcher.watch(session))

    @ls.feature(lsp.INITIALIZED)
    async def initialized(ls: Connection, params: lsp.InitializedParams) -> None:
        # Surface a failed agent start (bad model path, unreadable store) right away
        # instead of on the reviewer's first request.
        handle = ls.session.handle
        if handle is None:
            return

        def report(fut: Any) -> None:
            if not fut.cancelled() and fut.exception() is not None:
                ls.session.log_error(f"the agent could not start: {fut.exception()}")

        def on_ready(fut: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                ls.session.loop.call_soon_threadsafe(report, fut)

        handle.ready.add_done_callback(on_ready)
