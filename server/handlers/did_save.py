"""textDocument/didSave: saving a correction file denies with its text; saving an edit
file decides `edit` with the saved content (see reviewer_files.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from .. import reviewer_files
from ..documents import normalize_uri

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from ..connection import Connection


def register(ls: LanguageServer) -> None:
    @ls.feature(lsp.TEXT_DOCUMENT_DID_SAVE, lsp.SaveOptions(include_text=True))
    async def did_save(ls: Connection, params: lsp.DidSaveTextDocumentParams) -> None:
        session = ls.session
        uri = normalize_uri(params.text_document.uri)
        text = params.text
        if text is None:
            text = session.documents.text(uri)
        await reviewer_files.on_save(session, uri, text)
