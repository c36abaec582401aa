"""Fixtures for the tool tests: a workspace, a sibling "outside" directory, process probes."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from continual_lsp.config import Settings
from continual_lsp.tools.runner import ToolRunner
from continual_lsp.tools.sandbox import bwrap_available

SECRET = "OUTSIDE-SECRET-7f3a"


@pytest.fixture
def jail_layout(tmp_path: Path) -> tuple[Path, Path]:
    """root/ with symlinks that stay in and that point out, and outside/ with a secret."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (root / "a" / "b").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    (root / "a" / "file.txt").write_text("inside\n")
    (root / "link_out").symlink_to(outside)
    (root / "link_secret").symlink_to(outside / "secret.txt")
    (root / "link_in").symlink_to(root / "a")
    (root / "a" / "up").symlink_to("../..")
    (root / "dangling_out").symlink_to(outside / "missing.txt")
    (root / "rel_out").symlink_to("../outside/secret.txt")
    return root, outside


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file below `directory` with its bytes (symlinks not followed)."""
    out: dict[str, bytes] = {}
    for current, _dirs, files in os.walk(directory):
        for name in files:
            path = Path(current) / name
            out[str(path)] = b"<link>" if path.is_symlink() else path.read_bytes()
    return out


@pytest.fixture
def unsandboxed() -> Settings:
    return Settings(sandbox="none", bash_timeout=10)


@pytest.fixture
def ws(tmp_path: Path) -> ToolRunner:
    root = tmp_path / "ws"
    root.mkdir()
    return ToolRunner(root, Settings(sandbox="none", bash_timeout=10))


def bwrap_reason() -> str | None:
    ok, reason = bwrap_available()
    return None if ok else reason


requires_bwrap = pytest.mark.skipif(
    bwrap_reason() is not None,
    reason=f"the bwrap sandbox cannot run here: {bwrap_reason()}",
)


@pytest.fixture
def secret_home() -> Iterator[Path]:
    """A temp HOME with a planted ~/.ssh/id_test, outside /tmp when possible.

    Outside /tmp matters: the sandbox's private /tmp would hide a home under /tmp
    whether or not the secret covers work.
    """
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    home = Path(tempfile.mkdtemp(prefix="continual-home-", dir=base))
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_test").write_text("PRIVATE-KEY-d41d8\n")
    (home / ".netrc").write_text("machine example.com password NETRC-PW-99\n")
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def live_pids(marker: str) -> list[int]:
    """PIDs of live (not zombie) processes whose command line contains `marker`."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state = stat.rsplit(")", 1)[-1].split()[0]
        if needle in cmdline and state not in ("Z", "X"):
            found.append(int(entry))
    return found


def wait_gone(marker: str, seconds: float = 3.0) -> list[int]:
    """Poll until no live process carries `marker`; returns the survivors (if any)."""
    deadline = time.monotonic() + seconds
    while True:
        alive = live_pids(marker)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)
