"""The connection loop against a hostile or broken peer (issue 15, items 6 and 10)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from continual_lsp.config import Settings
from continual_lsp.server import transport
from continual_lsp.server.app import ContinualServer
from continual_lsp.server.main import Server
from continual_lsp.server.transport import frame, serve_connection

TOKENS = {"a-long-token-1": "alice"}


def _msg(payload: dict[str, Any] | bytes) -> bytes:
    if isinstance(payload, bytes):
        return b"Content-Length: %d\r\n\r\n" % len(payload) + payload
    return frame(payload)


def _initialize(msg_id: int = 1, token: str | None = None) -> dict[str, Any]:
    options = {"token": token} if token else {}
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": "initialize",
        "params": {"capabilities": {}, "initializationOptions": options},
    }


@pytest.fixture(autouse=True)
def _server(tmp_path: Path) -> Iterator[None]:
    global _SERVER
    settings = Settings(store_path=str(tmp_path / "s.sqlite3"), enable_training=False)
    _SERVER = Server(settings, lambda *_: SimpleNamespace(close=lambda: None))
    _SERVER.workspace = tmp_path
    yield
    _SERVER.close()


_SERVER: Server


def _make(user: str | None) -> ContinualServer:
    settings = _SERVER.settings
    ls = _SERVER.make_server(settings, _SERVER.workspace)

    @ls.feature("test/boom")
    def boom(_params: Any) -> None:
        raise RuntimeError("a bug deep inside")

    return ls


def _run(data: bytes, *, eof: bool = True, tokens: dict[str, str] | None = None) -> list[dict]:
    out: list[bytes] = []

    async def go() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        if eof:
            reader.feed_eof()

        def make(user: str | None) -> ContinualServer:
            ls = _make(user)
            ls.protocol.set_writer(_Capture(out))
            return ls

        await asyncio.wait_for(serve_connection(reader, out.append, make, tokens=tokens), 5)

    asyncio.run(go())
    replies = []
    for chunk in out:
        _, _, body = chunk.partition(b"\r\n\r\n")
        replies.append(json.loads(body))
    return replies


class _Capture:
    def __init__(self, out: list[bytes]) -> None:
        self.out = out

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def close(self) -> None:
        pass


def test_deeply_nested_json_is_a_parse_error_not_a_dead_loop() -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    replies = _run(_msg(deep) + _msg(_initialize()))
    assert replies[0]["error"]["code"] == transport.PARSE_ERROR
    assert "result" in replies[1]  # the loop lived on and answered the next request


def test_a_second_initialize_is_refused() -> None:
    replies = {r["id"]: r for r in _run(_msg(_initialize(1)) + _msg(_initialize(2)))}
    assert "result" in replies[1]
    assert replies[2]["error"]["code"] == transport.INVALID_REQUEST
    assert "already initialized" in replies[2]["error"]["message"]


def test_error_responses_carry_no_traceback() -> None:
    request = {"jsonrpc": "2.0", "id": 7, "method": "test/boom", "params": {}}
    replies = _run(_msg(_initialize()) + _msg(request))
    error = next(r for r in replies if r.get("id") == 7)["error"]
    assert "a bug deep inside" in error["message"]
    assert "traceback" not in json.dumps(error).lower()
    assert "File " not in json.dumps(error)


def test_unauthenticated_peer_cannot_make_the_server_buffer_much() -> None:
    """A 60 MB Content-Length before the token check is refused at once, unread."""
    header = b"Content-Length: %d\r\n\r\n" % (60 << 20)
    assert _run(header + b"x" * 1000, eof=False, tokens=TOKENS) == []


def test_unauthenticated_peer_is_dropped_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "AUTH_TIMEOUT_S", 0.3)
    assert _run(b"", eof=False, tokens=TOKENS) == []  # returns, instead of waiting for ever


class _StdioServer:
    """`continual-lsp serve` on stdio, its answers collected by id from a reader thread."""

    def __init__(self, tmp_path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "continual_lsp", "serve", "--store", str(tmp_path / "s")],
            cwd=tmp_path,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.answers: dict[Any, dict[str, Any]] = {}
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        out = self.proc.stdout
        while True:
            length = None
            while (line := out.readline()) and (line.strip() or length is None):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if not line or length is None:
                return  # the server closed its output
            message = json.loads(out.read(length))
            with self._cond:
                self.answers[message.get("id")] = message
                self._cond.notify_all()

    def send(self, *messages: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"".join(frame(m) for m in messages))  # one write: pipelined
        self.proc.stdin.flush()

    def answer(self, msg_id: Any, timeout: float = 30) -> dict[str, Any]:
        with self._cond:
            if not self._cond.wait_for(lambda: msg_id in self.answers, timeout):
                pytest.fail(f"request {msg_id} got no answer in {timeout:g} s: the server hangs")
            return self.answers[msg_id]


def _request(msg_id: int, method: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": None}


def test_shutdown_before_initialize_on_stdio_is_answered_and_exit_ends(tmp_path: Path) -> None:
    """Issue 32: `shutdown` before `initialize` left a stdio connection hanging (pygls
    drops every request after a shutdown without an answer)."""
    server = _StdioServer(tmp_path)
    try:
        server.send(_request(1, "continual/status"))
        early = server.answer(1, timeout=120)  # the process starts under any load
        assert early["error"]["code"] == transport.SERVER_NOT_INITIALIZED
        server.send(_request(2, "shutdown"))
        assert "result" in server.answer(2) and server.answer(2)["result"] is None
        server.send(_initialize(3), _request(4, "continual/status"))
        for msg_id in (3, 4):
            error = server.answer(msg_id, timeout=10)["error"]
            assert error["code"] == transport.INVALID_REQUEST
            assert "shutting down" in error["message"]
        server.send({"jsonrpc": "2.0", "method": "exit"})
        assert server.proc.wait(15) == 0  # a shutdown came first: exit code 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


def test_exit_right_behind_shutdown_still_answers_the_shutdown(tmp_path: Path) -> None:
    server = _StdioServer(tmp_path)
    try:
        server.send(_initialize(1))
        assert "result" in server.answer(1, timeout=120)
        server.send(_request(2, "shutdown"), {"jsonrpc": "2.0", "method": "exit"})
        assert server.proc.wait(15) == 0
        assert server.answer(2, timeout=5)["result"] is None
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


def test_a_header_line_past_the_readers_limit_is_skipped_not_fatal() -> None:
    """asyncio's StreamReader (TCP, and stdio on a pipe) raises ValueError for a line over
    its 64 KiB limit; the loop skips it like other junk and answers what follows."""
    junk = b"X" * (70 << 10) + b"\r\n"
    replies = _run(junk + _msg(_initialize()))
    assert "result" in replies[0]
