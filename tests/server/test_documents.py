"""Open documents are found through pygls' workspace under one spelling per file, while
edits go back to the client under its own spelling."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer

from continual_lsp.server.documents import Documents, normalize_uri
from continual_lsp.server.state import ClientCapabilities, SessionState


def _run(step: Generator[Any, Any, Any]) -> None:
    """Drive one of pygls' built-in handlers (no user handler is registered)."""
    for _ in step:
        raise AssertionError("no user handler expected")


def _server(root: Path) -> LanguageServer:
    ls = LanguageServer("test", "0")
    params = lsp.InitializeParams(capabilities=lsp.ClientCapabilities(), root_uri=root.as_uri())
    _run(ls.protocol.lsp_initialize(params))
    return ls


def _open(ls: LanguageServer, uri: str, text: str) -> None:
    item = lsp.TextDocumentItem(uri=uri, language_id="python", version=3, text=text)
    _run(ls.protocol.lsp_text_document__did_open(lsp.DidOpenTextDocumentParams(item)))


def test_a_document_opened_through_a_symlink_is_found_by_its_real_path(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "a b.py").write_text("x = 1\n")
    (tmp_path / "link").symlink_to(real)
    client_uri = "file://" + str(tmp_path / "link" / "a%20b.py")
    ls = _server(tmp_path)
    documents = Documents(ls, SessionState())
    _open(ls, client_uri, "x = 2\n")  # unsaved text differs from the disk

    uri = documents.opened(client_uri)

    assert uri == normalize_uri((real / "a b.py").as_uri()) != client_uri
    assert documents.is_open(uri)
    assert documents.text(uri) == "x = 2\n"
    assert documents.version(uri) == 3
    assert documents.client_uri(uri) == client_uri
    documents.closed(client_uri)
    assert not documents.is_open(uri)
    assert documents.text(uri) is None
    assert documents.client_uri(uri) == uri


def test_edits_are_versioned_when_the_client_takes_document_changes(tmp_path: Path) -> None:
    path = tmp_path / "a.py"
    path.write_text("a\nb\n")
    ls = _server(tmp_path)
    state = SessionState()
    documents = Documents(ls, state)
    _open(ls, path.as_uri(), "a\nb\n")
    uri = documents.opened(path.as_uri())

    plain = documents.workspace_edit(uri, "a\nb\n", "a\nB\n", 3)
    assert plain.changes is not None and plain.document_changes is None
    (edit,) = plain.changes[path.as_uri()]
    assert (edit.range.start.line, edit.range.end.line, edit.new_text) == (1, 2, "B\n")

    state.capabilities = ClientCapabilities(document_changes=True)
    versioned = documents.workspace_edit(uri, "a\nb\n", "a\nB\n", 3)
    assert versioned.document_changes is not None
    (change,) = versioned.document_changes
    assert isinstance(change, lsp.TextDocumentEdit)
    assert (change.text_document.uri, change.text_document.version) == (path.as_uri(), 3)
