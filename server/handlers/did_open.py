"""textDocument/didOpen: pygls stores the text; re-send the diagnostics of any pending
proposal on it (some clients drop diagnostics of files that were not open)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from ..proposals import diagnostics_for, publish

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from ..connection import Connection


def register(ls: LanguageServer) -> None:
    @ls.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: Connection, params: lsp.DidOpenTextDocumentParams) -> None:
        session = ls.session
        uri = session.documents.opened(params.text_document.uri)
        if diagnostics_for(session, uri):
            publish(session, uri)
