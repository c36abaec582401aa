"""Issue 19 in a real headless Neovim with the shipped module: accept one hunk and reject
another with a reason by code actions, "always allow" a command and see it run unasked in
the next task, undo an approved change."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from continual_lsp.store import Store

from .harness import REPO, decisions, editor_env, run_editor

pytestmark = [
    pytest.mark.nvim,
    pytest.mark.skipif(shutil.which("nvim") is None, reason="nvim is not installed"),
]


# Two decisions wait for a real SDPO step each (the worker loads the model first).
@pytest.mark.timeout(1500)
def test_neovim_hunks_allow_and_undo(workspace: Path, tmp_path: Path) -> None:
    store, report = tmp_path / "store.sqlite3", tmp_path / "report.json"
    server = [sys.executable, "-m", "tests.server.launch", "--store", str(store)]
    env = editor_env(
        workspace,
        tmp_path,
        report,
        [*server, "--script", "review", "--sandbox", "bwrap", "--training"],
        CONTINUAL_MODULE=str(REPO / "server" / "nvim" / "continual.lua"),
    )
    script = str(Path(__file__).parent / "nvim_review.lua")
    argv = ["nvim", "--headless", "-u", "NONE", "-i", "NONE", "-c", "luafile " + script]
    proc, result = run_editor(argv, REPO, env, report, 1200)
    assert proc.returncode == 0, f"{result.get('error')}\n{proc.stderr[-3000:]}"
    assert result["steps"] == ["hunks", "allowed", "ran unasked", "undone"], result

    # the file (and the buffer) hold exactly the accepted hunk
    ops = (workspace / "src/calc/ops.py").read_text()
    assert '"""Sum of a and b."""' in ops and "// len(values)" in ops
    assert result["ops_buffer"] + "\n" == ops
    partial_id, partial = next(
        (pid, d) for pid, d in decisions(store).items() if d["decision"] == "edit"
    )
    assert partial["correction"] == "hunk 2: Keep mean() as it is for now."
    # the next task's git status ran without a prompt; the one after it waits
    assert result["after_allowed"] == {"cmd": "echo tests-ran"}
    assert not (workspace / "CHANGES.md").exists()
    assert any("fired 1" in line for line in result["ledger"])
    db = Store(store)
    try:
        auto = db.events(kind="auto_approved")
        assert [e["payload"]["why"].split()[0:2] for e in auto] == [["allow", "rule"]]
        (undo,) = db.events(kind="undo")
        # SDPO jobs: the partial accept (an edit) and the undo (a late denial)
        assert db.has_job_for(partial_id) and db.has_job_for(undo["proposal_id"])
    finally:
        db.close()
