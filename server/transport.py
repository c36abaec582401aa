"""The message loop of one connection, over stdio or a TCP socket.

pygls' own loop is not used because (1) it drops a request whose params fail to
structure without answering it, so a client with a typo waits forever; (2) its
`start_tcp` serves one connection and stops; (3) TCP needs a token check before the
first message reaches a server. This loop answers every request, gates the first
message, and hands the rest to a fresh pygls protocol per connection.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cattrs import transform_error
from pygls.exceptions import JsonRpcException

from .app import ContinualServer

log = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
SERVER_NOT_INITIALIZED = -32002
UNAUTHORIZED = -32001  # JSON-RPC server-error range: "unknown error code" in LSP terms


class AsyncReader(Protocol):
    def readline(self) -> Awaitable[bytes]: ...
    def readexactly(self, n: int) -> Awaitable[bytes]: ...


MAX_MESSAGE_BYTES = 64 << 20
# Before the token is checked a peer is a stranger: its first message (initialize) must
# be small and come soon, or the connection ends without buffering anything large.
AUTH_MAX_BYTES = 64 << 10
AUTH_TIMEOUT_S = 10.0
# How long `exit` waits for a shutdown still being handled (edit signals flushed).
SHUTDOWN_ANSWER_S = 5.0


async def read_message(reader: AsyncReader, limit: int = MAX_MESSAGE_BYTES) -> bytes | None:
    """One framed body of at most `limit` bytes, or None at end of stream (or when the
    body would be larger). Headers other than Content-Length (Content-Type) are
    accepted and ignored."""
    length: int | None = None
    while True:
        try:
            line = await reader.readline()
        except ValueError:  # a line past the stream's limit: skipped, like other junk
            log.warning("skipped a header line longer than the reader's limit")
            continue
        if not line:
            return None
        line = line.strip()
        if not line:
            if length is None:
                continue  # stray blank line between messages
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                length = None
    if length is None or not 0 <= length <= limit:
        # A negative length would read to end of stream and a huge one would allocate
        # it: neither can be resynchronised, so the connection ends cleanly.
        log.error("Content-Length %s is out of range; closing the connection", length)
        return None
    try:
        body = await reader.readexactly(length)
    except Exception:  # asyncio.IncompleteReadError: the peer went away mid-message
        return None
    return body if len(body) == length else None


def frame(payload: dict[str, Any]) -> bytes:
    body = json.dumps(payload).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def error_response(msg_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def authenticate(data: dict[str, Any], tokens: dict[str, str]) -> tuple[str | None, str]:
    """(user, "") for an initialize request carrying a known token, else (None, why)."""
    if data.get("method") != "initialize" or "id" not in data:
        return None, (
            "the first request on a TCP connection must be initialize with "
            "initializationOptions.token"
        )
    params = data.get("params") if isinstance(data.get("params"), dict) else {}
    options = params.get("initializationOptions")
    given = options.get("token") if isinstance(options, dict) else None
    if not isinstance(given, str) or not given:
        return None, "unauthorized: initializationOptions.token is required"
    user = None
    for token, who in tokens.items():
        # Compare against every token, so timing does not reveal which prefix matched.
        if hmac.compare_digest(token.encode(), given.encode()):
            user = who
    if user is None:
        return None, "unauthorized: unknown token"
    return user, ""


@dataclass
class _Lifecycle:
    """Where a connection is between initialize, shutdown and exit."""

    initialized: bool = False
    shutting_down: bool = False

    def refusal(self, method: Any) -> tuple[int, str] | None:
        """(code, why) for a message of `method` arriving now, or None to handle it."""
        if self.shutting_down:
            # pygls drops every message after shutdown without a word: a client that
            # asks anything (initialize again, status) would wait forever.
            return INVALID_REQUEST, "the server is shutting down: only exit is accepted now"
        if method == "initialize":
            if self.initialized:
                return INVALID_REQUEST, (
                    "already initialized: initialize is accepted once per connection"
                )
            self.initialized = True
        elif not self.initialized and method is not None and method != "shutdown":
            # LSP: before initialize a request is answered ServerNotInitialized and a
            # notification dropped; shutdown is answered (nothing to stop) so a client
            # whose initialize failed can still end cleanly.
            return SERVER_NOT_INITIALIZED, "the server is not initialized: send initialize first"
        return None


def _parse(body: bytes, write: Callable[[bytes], Any]) -> dict[str, Any] | None:
    """The message as a JSON object, or None after answering why it is not one."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        write(frame(error_response(None, PARSE_ERROR, f"Parse error: {exc}")))
        return None
    if not isinstance(data, dict):
        write(frame(error_response(None, INVALID_REQUEST, "a message must be a JSON object")))
        return None
    return data


async def serve_connection(
    reader: AsyncReader,
    write: Callable[[bytes], Any],
    make_server: Callable[[str | None], ContinualServer],
    *,
    tokens: dict[str, str] | None = None,
) -> ContinualServer | None:
    """Run one connection to its end (EOF or `exit`); returns its server, if one started.

    With `tokens`, the first message must be `initialize` carrying a known token, else
    an error is answered and the connection ends; `make_server(user)` is called once
    the user is known. Without, `make_server(None)` is called at once.
    """
    ls = make_server(None) if tokens is None else None
    lifecycle = _Lifecycle()
    while True:
        if ls is None:
            try:
                body = await asyncio.wait_for(read_message(reader, AUTH_MAX_BYTES), AUTH_TIMEOUT_S)
            except TimeoutError:
                log.warning("refused a connection: no initialize within %g s", AUTH_TIMEOUT_S)
                return None
        else:
            body = await read_message(reader)
        if body is None:
            break
        data = _parse(body, write)
        if data is None:
            continue
        if ls is None:
            assert tokens is not None
            user, why = authenticate(data, tokens)
            if user is None:
                log.warning("refused a connection: %s", why)
                if "id" in data:
                    write(frame(error_response(data["id"], UNAUTHORIZED, why)))
                return None
            ls = make_server(user)
        method = data.get("method")
        if method == "exit":
            if lifecycle.shutting_down:
                await _answered_shutdown(ls)
            break
        refused = lifecycle.refusal(method)
        if refused is not None:
            if "id" in data and isinstance(method, str):
                write(frame(error_response(data["id"], *refused)))
            continue
        try:
            message = ls.protocol.structure_message(data)
        except RecursionError:
            if "id" in data:
                why = "params nested too deeply"
                write(frame(error_response(data["id"], INVALID_PARAMS, why)))
            continue
        except JsonRpcException as exc:
            if "id" in data and "method" in data:
                write(frame(error_response(data["id"], exc.code, _explain(data, exc))))
            else:
                log.warning("dropped a malformed notification: %s", _explain(data, exc))
            continue
        if method == "shutdown" and "id" in data:
            lifecycle.shutting_down = True
        try:
            ls.protocol.handle_message(message)
        except SystemExit:
            break
        except Exception:
            # pygls answers handler errors itself; this is a bug in dispatch. Keep serving.
            log.exception("handling %s failed", data.get("method"))
            if "id" in data and "method" in data:
                write(frame(error_response(data["id"], -32603, "internal error; see server log")))
    return ls


async def _answered_shutdown(ls: ContinualServer) -> None:
    """Wait (briefly) until the shutdown request has been answered: a client may send
    `exit` right behind it, and ending first would lose the answer it waits for."""
    deadline = asyncio.get_running_loop().time() + SHUTDOWN_ANSWER_S
    while not ls.protocol._shutdown and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)


def _explain(data: dict[str, Any], exc: JsonRpcException) -> str:
    """`invalid params for textDocument/codeAction: required field missing @ $.range`."""
    cause = exc.__cause__
    method = data.get("method", "?")
    if cause is not None:
        try:
            details = "; ".join(transform_error(cause, path="$"))
        except Exception:
            details = str(cause)
        details = details.replace("$.params.", "$.").replace("$.params", "$")
        return f"invalid params for {method}: {details}"
    return f"invalid message for {method}: {exc.message}"
