"""A real headless Neovim, plain LSP only (no continual/* notifications): code actions,
commands and window/showDocument correction and edit files, saved with :write."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from continual_lsp.store import Store

from .harness import REPO

pytestmark = [
    pytest.mark.nvim,
    pytest.mark.skipif(shutil.which("nvim") is None, reason="nvim is not installed"),
]


def _env(
    workspace: Path, tmp_path: Path, store: Path, report: Path, **extra: str
) -> dict[str, str]:
    """Neovim and the server it starts get a private HOME, but the model cache is shared:
    without it every server would dequantise the GGUF again (~20 s)."""
    from continual_lsp.policy.model_files import cache_dir

    server = [
        sys.executable,
        "-m",
        "tests.server.launch",
        "--store",
        str(store),
        "--script",
        "flow",
    ]
    return {
        **os.environ,
        "CONTINUAL_WS": str(workspace),
        "CONTINUAL_OUT": str(report),
        "CONTINUAL_CMD": json.dumps(server),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "HOME": str(tmp_path),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "CONTINUAL_LSP_CACHE": str(cache_dir().parent),
        **extra,
    }


def test_neovim_approve_deny_with_comment_and_edit(workspace: Path, tmp_path: Path) -> None:
    store, report = tmp_path / "store.sqlite3", tmp_path / "report.json"
    env = _env(workspace, tmp_path, store, report)
    proc = subprocess.run(
        [
            "nvim",
            "--headless",
            "-u",
            "NONE",
            "-i",
            "NONE",
            "-c",
            "luafile " + str(Path(__file__).parent / "nvim_flow.lua"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    result = json.loads(report.read_text()) if report.exists() else {}
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
    s = Store(store)
    try:
        rows = [s.decision(r[0]) for r in s._query("SELECT proposal_id FROM decisions")]
    finally:
        s.close()
    by_kind = {d["decision"]: d for d in rows if d}
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
    proc = subprocess.run(
        ["nvim", "--headless", "-u", "NONE", "-i", "NONE", "-c", "luafile " + script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    result = json.loads(report.read_text()) if report.exists() else {}
    assert proc.returncode == 0, f"{result.get('error')}\n{proc.stderr[-3000:]}"
    assert result["steps"] == ["diff", "approved", "denied"]
    s = Store(store)
    try:
        rows = [s.decision(r[0]) for r in s._query("SELECT proposal_id FROM decisions")]
    finally:
        s.close()
    assert sorted(d["decision"] for d in rows if d) == ["approve", "deny"]
