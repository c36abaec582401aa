"""textDocument/didClose: pygls forgets the text, the session the client's spelling of
its uri; the server keeps its files (a reviewer
may reopen a correction file and save it later)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from ..connection import Connection


def register(ls: LanguageServer) -> None:
    @ls.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: Connection, params: lsp.DidCloseTextDocumentParams) -> None:
        ls.session.documents.closed(params.text_document.uri)
