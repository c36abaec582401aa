"""The pygls server object: one per connection, with the handlers of `handlers/`.

pygls structures the params of methods it does not know into namedtuples (keys that are
not identifiers get renamed); the `continual/*` methods keep plain JSON instead, so the
pydantic wire models of `continual_lsp.protocol` validate them exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, default_converter
from pygls.protocol.json_rpc import MsgId

import continual_lsp

from .handlers import register_all

if TYPE_CHECKING:
    from .session import Session

CUSTOM_PREFIX = "continual/"


@attrs.define
class RawRequest:
    id: MsgId
    method: str
    jsonrpc: str
    params: Any = None


@attrs.define
class RawNotification:
    method: str
    jsonrpc: str
    params: Any = None


class ContinualProtocol(LanguageServerProtocol):
    def structure_message(self, data: dict[str, Any]) -> Any:
        method = data.get("method")
        if "jsonrpc" in data and isinstance(method, str) and method.startswith(CUSTOM_PREFIX):
            params = data.get("params")
            if "id" in data:
                return RawRequest(
                    id=data["id"], method=method, jsonrpc=data["jsonrpc"], params=params
                )
            return RawNotification(method=method, jsonrpc=data["jsonrpc"], params=params)
        return super().structure_message(data)

    def _send_response(
        self, msg_id: MsgId, result: Any | None = None, error: lsp.ResponseError | None = None
    ) -> None:
        # pygls puts the server's traceback into an internal error's `data`; it is
        # logged here and never sent to a client.
        if error is not None and error.data is not None:
            error = attrs.evolve(error, data=None)
        super()._send_response(msg_id, result, error)

    def notify(self, method: str, params: Any | None = None) -> None:
        if method.startswith(CUSTOM_PREFIX):
            # Our notifications are plain dicts (pydantic dumps), sent as they are.
            self._send_data(RawNotification(method=method, jsonrpc=self.VERSION, params=params))
            return
        super().notify(method, params)


class ContinualServer(LanguageServer):
    session: Session

    def __init__(self) -> None:
        super().__init__(
            name="continual-lsp",
            version=getattr(continual_lsp, "__version__", "0.1.0"),
            text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental,
            protocol_cls=ContinualProtocol,
            converter_factory=default_converter,
        )


def build_server() -> ContinualServer:
    ls = ContinualServer()
    register_all(ls)
    return ls
