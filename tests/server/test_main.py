"""Startup pieces of `serve`: tokens, per-user settings, addresses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from continual_lsp.config import Settings
from continual_lsp.server.main import ServeError, load_tokens, parse_address, user_settings

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
