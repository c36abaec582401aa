"""Generated guard code is stopped or refused, and the calling process lives on."""

from __future__ import annotations

import os
import time

import pytest

from continual_lsp.lanes.guards.guard_code import run_guard_code

PAYLOAD = {"call": {"tool": "bash", "arguments": {"cmd": "ls"}}, "preview": None}


def run(body: str, **kw):
    return run_guard_code("def check(call, preview):\n" + body, PAYLOAD, **kw)


def test_ok_guard_returns_its_answer() -> None:
    res = run("    return {'action': 'block', 'message': call['tool']}\n")
    assert res.ok and res.value == {"action": "block", "message": "bash"}


def test_infinite_loop_is_stopped() -> None:
    t = time.monotonic()
    res = run("    while True:\n        pass\n", timeout_s=1.0)
    assert not res.ok and "timed out" in res.error
    assert time.monotonic() - t < 10


def test_ten_gigabytes_are_refused() -> None:
    res = run("    x = bytearray(10 * 1024**3)\n    return len(x)\n")
    assert not res.ok
    assert "MemoryError" in res.error or "died" in res.error


def test_socket_is_refused(tmp_path) -> None:
    res = run("    import socket\n    s = socket.create_connection(('127.0.0.1', 9), timeout=1)\n")
    assert not res.ok
    assert "sandbox" in res.error or "Errno" in res.error or "Error" in res.error


def test_write_outside_temp_dir_is_refused(tmp_path) -> None:
    target = tmp_path / "escape.txt"
    res = run(f"    open({str(target)!r}, 'w').write('x')\n")
    assert not res.ok
    assert not target.exists()
    res = run(f"    import os\n    os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)\n")
    assert not res.ok
    assert not target.exists()


def test_subprocess_is_refused() -> None:
    res = run("    import os\n    os.system('true')\n")
    assert not res.ok and "sandbox" in res.error


@pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap not installed")
def test_network_namespace_even_without_the_audit_hook() -> None:
    # Remove the in-interpreter hook's reach by using _socket directly: the namespace holds.
    res = run(
        "    import _socket\n"
        "    s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)\n"
        "    s.connect(('1.1.1.1', 80))\n"
    )
    assert not res.ok


def test_an_interpreter_installed_under_tmp_still_runs_guards(tmp_path, monkeypatch) -> None:
    """Issue 15: in a clone under /tmp the sandbox's private /tmp hid the venv's python,
    every guard 'died' and was skipped: guards failed open."""
    import sys

    prefix = tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    monkeypatch.setattr(sys, "executable", str(prefix / "bin" / "python"))
    monkeypatch.setattr(sys, "prefix", str(prefix))
    res = run("    return 'ran'\n")
    assert res.ok and res.value == "ran", res.error
