"""A real headless Neovim, plain LSP only (no continual/* notifications): code actions,
commands and window/showDocument correction and edit files, saved with :write."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from .harness import REPO, decisions, editor_env, run_editor

pytestmark = [
    pytest.mark.nvim,
    pytest.mark.skipif(shutil.which("nvim") is None, reason="nvim is not installed"),
]


def _env(
    workspace: Path, tmp_path: Path, store: Path, report: Path, **extra: str
) -> dict[str, str]:
    server = [sys.executable, "-m", "tests.server.launch", "--store", str(store)]
    return editor_env(workspace, tmp_path, report, [*server, "--script", "flow"], **extra)


def test_neovim_approve_deny_with_comment_and_edit(workspace: Path, tmp_path: Path) -> None:
    store, report = tmp_path / "store.sqlite3", tmp_path / "report.json"
    env = _env(workspace, tmp_path, store, report)
    script = str(Path(__file__).parent / "nvim_flow.lua")
    argv = ["nvim", "--headless", "-u", "NONE", "-i", "NONE", "-c", "luafile " + script]
    proc, result = run_editor(argv, REPO, env, report, 180)
    assert proc.returncode == 0, f"{result.get('error')}\n{proc.stderr[-3000:]}"
    assert result["ok"], result

    # buffers: the approved line, the edited docstring; the test file untouched
    assert result["approve_buffer"] == "    return sum(values) / len(values)"
    assert '    """Return a + b."""' in result["ops_buffer"]
    assert "    assert mean([1, 2]) == 1.5" in result["tests_buffer"]
    # disk
    ops = (workspace / "src/calc/ops.py").read_text()
    assert "/ len(values)" in ops and '"""Return a + b."""' in ops
    assert "== 1.5" in (workspace / "tests/test_ops.py").read_text()
    assert [m.split(" (")[0] for m in result["requests"]] == ["Proposed bash: run `echo tests-ran`"]
    # store
    by_kind = {d["decision"]: d for d in decisions(store).values()}
    assert set(by_kind) == {"approve", "deny", "edit"}
    assert by_kind["deny"]["correction"] == "Never weaken a test; fix the code instead."
    assert "Return a + b." in by_kind["edit"]["diff"]


def test_neovim_module_commands(workspace: Path, tmp_path: Path) -> None:
    """The shipped module: setup() starts the server; :ContinualStart, :ContinualDiff,
    :ContinualApprove, :ContinualDeny (vim.ui.input), :ContinualLedger, :ContinualStatus."""
    store, report = tmp_path / "store.sqlite3", tmp_path / "report.json"
    env = _env(
        workspace,
        tmp_path,
        store,
        report,
        CONTINUAL_MODULE=str(REPO / "server" / "nvim" / "continual.lua"),
    )
    script = str(Path(__file__).parent / "nvim_module.lua")
    argv = ["nvim", "--headless", "-u", "NONE", "-i", "NONE", "-c", "luafile " + script]
    proc, result = run_editor(argv, REPO, env, report, 180)
    assert proc.returncode == 0, f"{result.get('error')}\n{proc.stderr[-3000:]}"
    assert result["steps"] == ["diff", "approved", "denied"]
    assert sorted(d["decision"] for d in decisions(store).values()) == ["approve", "deny"]
