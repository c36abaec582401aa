"""textDocument/didClose: pygls forgets the text; the server keeps its files (a reviewer
may reopen a correction file and save it later)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

if TYPE_CHECKING:
    from ..app import ContinualServer


def register(ls: ContinualServer) -> None:
    @ls.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: ContinualServer, params: lsp.DidCloseTextDocumentParams) -> None:
        return None
