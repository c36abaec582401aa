"""Checkpoints as the agent drives them (before, run, after), with the real store, runner and
shell; no model. Issue 32 finding 8: a bash change that kept size and mtime (`touch -r`)
was not seen, and undo answered ok while restoring nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from continual_lsp.agent.checkpoints import Checkpoints, UndoError
from continual_lsp.config import Settings
from continual_lsp.store import Store
from continual_lsp.tools.base import ToolCall
from continual_lsp.tools.runner import ToolRunner


class Harness:
    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "ws"
        self.root.mkdir()
        self.store = Store(tmp_path / "store.sqlite3")
        self.runner = ToolRunner(self.root, Settings(sandbox="none", bash_timeout=10))
        self.checkpoints = Checkpoints(self.store, self.runner)
        self.task = self.store.create_task("t", str(self.root))

    def approve(self, tool: str, **arguments: Any) -> str:
        """Run one approved call as `calls.execute` does; returns its proposal id."""
        pid = self.store.add_proposal(self.task, 0, tool, arguments, [], [], [], None, None)
        call = ToolCall(tool=tool, arguments=arguments)
        if tool == "bash":
            snap = self.checkpoints.before_bash(pid)
            result = self.runner.execute(call)
            self.checkpoints.after_bash(pid, snap)
        else:
            rel = self.runner.target_path(call)
            assert rel is not None
            self.checkpoints.before_file(pid, rel)
            result = self.runner.execute(call)
            self.checkpoints.after_file(pid, rel, result.ok)
        assert result.ok, result.output
        return pid

    def undo_latest(self) -> list[str]:
        target = self.checkpoints.latest()
        assert target is not None
        return self.checkpoints.restore(target, self.checkpoints.check(target))


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


SAME_SIZE_SAME_MTIME = (
    "touch -r a.txt ref && printf 'BBBB\\n' > a.txt && touch -r ref a.txt && rm ref"
)


def test_a_bash_change_that_keeps_size_and_mtime_is_undone(h: Harness) -> None:
    write = h.approve("write", path="a.txt", content="AAAA\n")
    before = (h.root / "a.txt").stat()
    h.approve("bash", cmd=SAME_SIZE_SAME_MTIME)
    after = (h.root / "a.txt").stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert (h.root / "a.txt").read_text() == "BBBB\n"
    # Undo of the bash call puts back what it replaced, not "ok" with nothing restored.
    assert h.undo_latest() == ["a.txt"]
    assert (h.root / "a.txt").read_text() == "AAAA\n"
    # Then the write can be undone too.
    assert h.checkpoints.latest() == write
    assert h.undo_latest() == ["a.txt"]
    assert not (h.root / "a.txt").exists()


def test_undo_of_a_write_after_a_same_size_same_mtime_change_is_refused(h: Harness) -> None:
    write = h.approve("write", path="a.txt", content="AAAA\n")
    h.runner.execute(ToolCall(tool="bash", arguments={"cmd": SAME_SIZE_SAME_MTIME}))
    with pytest.raises(UndoError, match=r"a\.txt changed since"):
        h.checkpoints.check(write)
    assert (h.root / "a.txt").read_text() == "BBBB\n"


def test_a_bash_call_that_changed_nothing_is_not_what_undo_takes(h: Harness) -> None:
    write = h.approve("write", path="a.txt", content="AAAA\n")
    noop = h.approve("bash", cmd="cat a.txt")
    with pytest.raises(UndoError, match="changed no file"):
        h.checkpoints.check(noop)
    assert h.checkpoints.latest() == write


def test_a_large_file_changed_in_place_makes_the_undo_refused(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Too large to keep, so not restorable: seen by hash, and undo says it cannot."""
    monkeypatch.setattr("continual_lsp.agent.checkpoints.MAX_FILE_BYTES", 2)
    (h.root / "a.txt").write_text("AAAA\n")
    bash = h.approve("bash", cmd=SAME_SIZE_SAME_MTIME)
    assert h.checkpoints.latest() == bash
    with pytest.raises(UndoError, match=r"cannot be undone.*a\.txt"):
        h.checkpoints.check(bash)
