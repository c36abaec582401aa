"""Startup pieces of `serve`: tokens, per-user settings, addresses."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from pygls.io_ import StdinAsyncReader

from continual_lsp.config import Settings
from continual_lsp.learning.team_worker import can_share
from continual_lsp.server.main import (
    MAX_CONNECTIONS_PER_ADDRESS,
    ServeError,
    _stdin_reader,
    load_tokens,
    parse_address,
    shared_server_settings,
    tokens_path,
    user_settings,
)
from continual_lsp.store import Store
from continual_lsp.tools import run_bash
from tests.tools.conftest import requires_bwrap

from .harness import REPO


def test_tokens_from_argument_file_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONTINUAL_LSP_TOKEN", raising=False)
    monkeypatch.delenv("CONTINUAL_LSP_TOKENS_FILE", raising=False)
    settings = Settings(user="dana")
    assert load_tokens("a-long-token", settings) == {"a-long-token": "dana"}
    single = tmp_path / "token"
    single.write_text("from-a-file-123\n")
    assert load_tokens(None, settings, str(single)) == {"from-a-file-123": "dana"}
    mapping = tmp_path / "tokens.json"
    mapping.write_text(json.dumps({"token-of-erin-1": "erin"}))
    monkeypatch.setenv("CONTINUAL_LSP_TOKENS_FILE", str(mapping))
    assert load_tokens(None, settings) == {"token-of-erin-1": "erin"}
    monkeypatch.setenv("CONTINUAL_LSP_TOKEN", "env-token-456")
    assert load_tokens(None, settings) == {"env-token-456": "dana"}
    with pytest.raises(ServeError, match="at least 8"):
        load_tokens("short", settings)
    with pytest.raises(ServeError, match="does not exist"):
        load_tokens(None, settings, str(tmp_path / "missing"))
    mapping.write_text(json.dumps({"token-of-bad-1": "../etc"}))
    with pytest.raises(ServeError, match="user name"):
        load_tokens(str(mapping), settings)


def test_user_settings_separate_stores(tmp_path: Path) -> None:
    base = Settings(store_path=str(tmp_path / "s.sqlite3"), adapters_dir=str(tmp_path / "ad"))
    alice, bob = user_settings(base, "alice"), user_settings(base, "bob")
    assert alice.store_path == str(tmp_path / "users" / "alice" / "s.sqlite3")
    assert alice.adapters_dir == str(tmp_path / "ad" / "alice")
    assert alice.store_path != bob.store_path and alice.user == "alice"


def test_a_tcp_server_trains_every_user_on_one_shared_worker_unless_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONTINUAL_LSP_SHARED_TRAINING", raising=False)
    assert not Settings.load().shared_training  # stdio: one user, a worker of their own
    alice = user_settings(shared_server_settings(Settings.load(), None), "alice")
    assert alice.shared_training and can_share(alice)
    config = tmp_path / "server.toml"
    config.write_text("shared_training = false\n")
    assert not shared_server_settings(Settings.load(config), None).shared_training
    monkeypatch.setenv("CONTINUAL_LSP_SHARED_TRAINING", "false")
    assert not shared_server_settings(Settings.load(), None).shared_training


def test_a_tcp_server_samples_in_float32_unless_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONTINUAL_LSP_SAMPLE_DTYPE", raising=False)
    assert Settings.load().sample_dtype == "auto"  # stdio: bf16 where the CPU has it
    assert shared_server_settings(Settings.load(), None).sample_dtype == "float32"
    config = tmp_path / "server.toml"
    config.write_text('sample_dtype = "bfloat16"\n')
    assert shared_server_settings(Settings.load(config), None).sample_dtype == "bfloat16"


@requires_bwrap
def test_one_users_bash_sees_no_other_users_secrets() -> None:
    """Issue 15: an approved bash of alice printed the tokens file and bob's store."""
    # Outside /tmp: the sandbox's private /tmp would hide all of it whatever the fix.
    base_dir = Path(tempfile.mkdtemp(prefix="continual-tcp-", dir="/var/tmp"))
    try:
        tokens = base_dir / "tokens.json"
        tokens.write_text(json.dumps({"tok-alice-123": "alice", "tok-bob-4567": "bob"}))
        roots = base_dir / "ws"
        (roots / "alice").mkdir(parents=True)
        (roots / "bob").mkdir()
        (roots / "bob" / "notes.txt").write_text("BOB-WORK\n")
        base = Settings(
            store_path=str(base_dir / "stores" / "s.sqlite3"),
            workspace_roots=[str(roots)],
            bash_timeout=10,
        )
        assert tokens_path(None, str(tokens)) == tokens
        shared = shared_server_settings(base, tokens)
        alice, bob = user_settings(shared, "alice"), user_settings(shared, "bob")
        Store(bob.store_path).close()
        bob_dir = Path(bob.store_path).parent
        result = run_bash(
            f"cat {tokens}; ls {bob_dir}; cat {roots}/bob/notes.txt; echo mine > own.txt;"
            " cat own.txt",
            roots / "alice",
            alice,
        )
        assert "tok-bob" not in result.output
        assert "s.sqlite3" not in result.output
        assert "BOB-WORK" not in result.output
        assert "mine" in result.output  # alice's own workspace stays usable
    finally:
        shutil.rmtree(base_dir, ignore_errors=True)


def test_parse_address() -> None:
    assert parse_address("8123") == ("127.0.0.1", 8123)
    assert parse_address("0.0.0.0:9") == ("0.0.0.0", 9)
    with pytest.raises(ServeError):
        parse_address("host:port")


def test_tcp_without_any_token_does_not_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUAL_LSP_TOKEN")}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.server.launch", "--store", str(tmp_path / "s"), "--tcp", "0"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "TCP needs a token" in proc.stderr


def test_stdout_is_reserved_for_the_protocol() -> None:
    """After protect_stdout, prints and child processes land on stderr; only the
    protocol stream reaches the real stdout."""
    code = (
        "import os, sys\n"
        "from continual_lsp.server.main import protect_stdout\n"
        "proto = protect_stdout()\n"
        "print('stray print')\n"
        "os.system('echo from a child')\n"
        "proto.write(b'Content-Length: 2\\r\\n\\r\\n{}')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, timeout=60)
    assert proc.stdout == b"Content-Length: 2\r\n\r\n{}"
    assert b"stray print" in proc.stderr and b"from a child" in proc.stderr


@pytest.mark.parametrize("flag", ["--token", "--token-f", "--token-file"])
def test_a_token_on_the_command_line_is_refused_and_never_echoed(flag: str) -> None:
    secret = "SECRET-TOKEN-5e1f9"
    proc = subprocess.run(
        [sys.executable, "-m", "continual_lsp", "serve", "--tcp", "0", flag, secret],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert secret not in proc.stderr + proc.stdout
    assert "token" in proc.stderr


def test_connections_per_address_are_capped(tmp_path: Path) -> None:
    env = {**os.environ, "CONTINUAL_LSP_TOKEN": "a-long-token-42"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.server.launch", "--store", str(tmp_path / "s"),
         "--tcp", "127.0.0.1:0"],
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    sockets: list[socket.socket] = []
    try:
        assert proc.stderr is not None
        line = ""
        while "listening on" not in line:
            line = proc.stderr.readline()
            assert line, "the server exited before listening"
        port = int(line.rsplit(":", 1)[1])
        for _ in range(MAX_CONNECTIONS_PER_ADDRESS + 1):
            sockets.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        sockets[-1].settimeout(5)
        assert sockets[-1].recv(1) == b""  # the one over the cap is closed at once
        sockets[0].settimeout(0.5)
        with pytest.raises(TimeoutError):
            sockets[0].recv(1)  # the others wait for their initialize
    finally:
        for sock in sockets:
            sock.close()
        proc.terminate()
        proc.wait(timeout=30)


def test_stdin_on_a_pipe_is_read_on_the_event_loop(tmp_path: Path) -> None:
    """No thread hand-off a message (bench/lsp_latency.py: p99 ~140 ms while sampling
    with pygls' threaded reader, ~19 ms without); a regular file keeps the thread."""
    read_end, write_end = os.pipe()
    regular = tmp_path / "stdin"
    regular.write_bytes(b"Content-Length: 2\r\n\r\n{}")

    async def readers() -> tuple[object, bytes, object]:
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            os.write(write_end, b"Content-Length: 2\r\n")
            on_loop = await _stdin_reader(pipe)
            line = await on_loop.readline()
            with regular.open("rb") as file:
                threaded = await _stdin_reader(file)
            return on_loop, line, threaded

    try:
        on_loop, line, threaded = asyncio.run(readers())
    finally:
        os.close(write_end)
    assert isinstance(on_loop, asyncio.StreamReader)
    assert line == b"Content-Length: 2\r\n"
    assert isinstance(threaded, StdinAsyncReader)
