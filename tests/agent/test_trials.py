"""A command run on a throw-away copy of the workspace (`trials.run_on_copy`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from continual_lsp.agent import trials
from continual_lsp.agent.candidates import Candidate
from continual_lsp.config import Settings
from continual_lsp.tools.base import Preview, ToolCall
from continual_lsp.tools.sandbox import bwrap_available

SETTINGS = Settings(enable_training=False, sandbox="bwrap", allow_unsandboxed=False)
UNSANDBOXED = Settings(enable_training=False, sandbox="none", allow_unsandboxed=True)
requires_bwrap = pytest.mark.skipif(
    not bwrap_available()[0], reason="the bwrap sandbox cannot run here"
)


@requires_bwrap
def test_a_command_runs_on_a_copy_and_leaves_the_workspace_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("before\n")
    result = trials.run_on_copy(tmp_path, "cat a.txt; echo after > a.txt; exit 3", SETTINGS)
    assert result is not None and result.exit_code == 3 and "before" in result.output
    assert (tmp_path / "a.txt").read_text() == "before\n"


def test_a_workspace_too_large_to_copy_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("x\n")
    monkeypatch.setattr(trials, "MAX_COPIED_FILES", 1)
    assert trials.run_on_copy(tmp_path, "touch ran", SETTINGS) is None
    assert not (tmp_path / "ran").exists()


def test_an_unsandboxed_bash_runs_nothing_unapproved(tmp_path: Path) -> None:
    """`sandbox = "none"` lets an approved call run as this user; a command nobody
    approved (the workspace's own test script) is not run that way."""
    assert trials.run_on_copy(tmp_path, "touch ran", UNSANDBOXED) is None
    assert not (tmp_path / "ran").exists()


def test_where_bash_may_not_run_nothing_runs(tmp_path: Path) -> None:
    sandboxed = Settings(enable_training=False, sandbox="bwrap", allow_unsandboxed=False)
    runs, _why = bwrap_available()
    result = trials.run_on_copy(tmp_path, "touch ran", sandboxed)
    assert (result is not None) is runs
    assert not (tmp_path / "ran").exists()


def _fix(path: str, content: str) -> Candidate:
    call = ToolCall(tool="write", arguments={"path": path, "content": content})
    preview = Preview(path=path, old_content=None, new_content=content, diff="", old_sha256=None)
    return Candidate(call=call, completion=None, prompt_tokens=[], preview=preview)


def test_an_unsandboxed_bash_tries_no_change(tmp_path: Path) -> None:
    """The model's changes are no reviewer's: with `sandbox = "none"` none is run."""
    fix = _fix("ok.sh", "touch ran\n")
    trial = trials.first_passing(tmp_path, "bash ok.sh && cp ran ../ran", [fix], UNSANDBOXED)
    assert trial.passed is None and trial.ran == 0 and trial.stopped == trials.UNSANDBOXED


@requires_bwrap
def test_in_the_sandbox_the_first_change_that_passes_is_found(tmp_path: Path) -> None:
    failing, passing = _fix("ok.sh", "exit 1\n"), _fix("ok.sh", "exit 0\n")
    trial = trials.first_passing(tmp_path, "bash ok.sh", [failing, passing], SETTINGS)
    assert trial.passed is passing and trial.ran == 2
    assert not (tmp_path / "ok.sh").exists()  # tried on the copy only
