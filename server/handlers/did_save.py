"""textDocument/didSave: saving a correction file denies with its text; saving an edit
file decides `edit` with the saved content (see Session.on_save)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from ..session import normalize_uri

if TYPE_CHECKING:
    from ..app import ContinualServer


def register(ls: ContinualServer) -> None:
    @ls.feature(lsp.TEXT_DOCUMENT_DID_SAVE, lsp.SaveOptions(include_text=True))
    async def did_save(ls: ContinualServer, params: lsp.DidSaveTextDocumentParams) -> None:
        session = ls.session
        uri = normalize_uri(params.text_document.uri)
        text = params.text
        if text is None:
            text = session.buffer_text(uri)
        await session.on_save(uri, text)
