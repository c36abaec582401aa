"""textDocument/didChange: pygls applies the change; a change by the reviewer to lines a
proposal just wrote is an edit signal (see Session.on_change)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from ..session import normalize_uri

if TYPE_CHECKING:
    from ..app import ContinualServer


def register(ls: ContinualServer) -> None:
    @ls.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: ContinualServer, params: lsp.DidChangeTextDocumentParams) -> None:
        ls.session.on_change(normalize_uri(params.text_document.uri), list(params.content_changes))
