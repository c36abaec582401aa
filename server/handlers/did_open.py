"""textDocument/didOpen: pygls stores the text; re-send the diagnostics of any pending
proposal on it (some clients drop diagnostics of files that were not open)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from ..session import normalize_uri

if TYPE_CHECKING:
    from ..app import ContinualServer


def register(ls: ContinualServer) -> None:
    @ls.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: ContinualServer, params: lsp.DidOpenTextDocumentParams) -> None:
        uri = normalize_uri(params.text_document.uri)
        if ls.session.diagnostics_for(uri):
            ls.session.publish(uri)
