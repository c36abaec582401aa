"""textDocument/didChange: pygls applies the change; a change by the reviewer to lines a
proposal just wrote is an edit signal (see edit_signals.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from .. import edit_signals
from ..documents import normalize_uri

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from ..connection import Connection


def register(ls: LanguageServer) -> None:
    @ls.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: Connection, params: lsp.DidChangeTextDocumentParams) -> None:
        uri = normalize_uri(params.text_document.uri)
        edit_signals.on_change(ls.session, uri, list(params.content_changes))
