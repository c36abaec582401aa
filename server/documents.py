"""The client's open documents, read through pygls' workspace, and the edits the server
makes to them.

The server keys everything by one spelling per file (`normalize_uri`); pygls keys its
documents by the client's spelling. `SessionState.open_documents` maps the one to the
other as documents open and close, so a lookup is one `workspace.get_text_document`.
"""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path

from .errors import RequestFailed
from .lsp_text import line_edit, line_position
from .state import SessionState


def normalize_uri(uri: str) -> str:
    """One spelling per file (clients differ in percent-encoding and symlinks)."""
    path = to_fs_path(uri)
    if path is None:
        return uri
    return from_fs_path(str(Path(path).resolve())) or uri


class Documents:
    def __init__(self, ls: LanguageServer, state: SessionState) -> None:
        self.ls = ls
        self.state = state

    def opened(self, client_uri: str) -> str:
        """Remember a didOpen; returns the normalised uri."""
        uri = normalize_uri(client_uri)
        self.state.open_documents[uri] = client_uri
        return uri

    def closed(self, client_uri: str) -> None:
        self.state.open_documents.pop(normalize_uri(client_uri), None)

    def is_open(self, uri: str) -> bool:
        return uri in self.state.open_documents

    def client_uri(self, uri: str) -> str:
        """The spelling the client used for an open document (applyEdit must match it)."""
        return self.state.open_documents.get(uri, uri)

    def text(self, uri: str) -> str | None:
        """The client's text of an open document, else None."""
        raw = self.state.open_documents.get(uri)
        return None if raw is None else self.ls.workspace.get_text_document(raw).source

    def version(self, uri: str) -> int | None:
        raw = self.state.open_documents.get(uri)
        return None if raw is None else self.ls.workspace.get_text_document(raw).version

    def workspace_edit(
        self, uri: str, before: str, after: str, version: int | None
    ) -> lsp.WorkspaceEdit:
        """A WorkspaceEdit turning `before` (the client's buffer) into `after`."""
        change = line_edit(before, after)
        units = self.ls.workspace.position_codec.client_num_units
        start = line_position(before, change.start, units)
        end = line_position(before, change.old_end, units)
        edit = lsp.TextEdit(
            range=lsp.Range(
                start=lsp.Position(line=start[0], character=start[1]),
                end=lsp.Position(line=end[0], character=end[1]),
            ),
            new_text=change.text,
        )
        raw = self.client_uri(uri)
        if self.state.capabilities.document_changes:
            # A versioned edit is refused by the client if the buffer moved on meanwhile.
            return lsp.WorkspaceEdit(
                document_changes=[
                    lsp.TextDocumentEdit(
                        text_document=lsp.OptionalVersionedTextDocumentIdentifier(
                            uri=raw, version=version
                        ),
                        edits=[edit],
                    )
                ]
            )
        return lsp.WorkspaceEdit(changes={raw: [edit]})

    async def apply(
        self, uri: str, before: str, after: str, label: str, *, versioned: bool = True
    ) -> None:
        """Change the client's buffer from `before` to `after`. Versioned: at the version
        the server last saw, so a client whose buffer moved on refuses it."""
        version = self.version(uri) if versioned else None
        edit = self.workspace_edit(uri, before, after, version)
        try:
            result = await self.ls.workspace_apply_edit_async(
                lsp.ApplyWorkspaceEditParams(edit=edit, label=label)
            )
        except Exception as exc:
            raise RequestFailed(f"the editor could not apply the edit: {exc}") from exc
        if not result.applied:
            reason = result.failure_reason or "no reason given"
            raise RequestFailed(f"the editor refused the edit ({reason}); nothing was recorded")
