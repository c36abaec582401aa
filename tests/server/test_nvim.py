"""A real headless Neovim, plain LSP only (no continual/* notifications): code actions,
commands and window/showDocument correction and edit files, saved with :write."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from .harness import REPO, decisions, editor_env, in_view, run_editor, task_ends
from .scripted import DONE

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
    assert [m.split(" (")[0] for m in result["requests"]] == [
        "Proposed bash: run `echo tests-ran`",
        "Proposed done: finish the task: " + DONE["arguments"]["summary"],
    ]
    # the agent's done is offered as Finish task; approving it ends the task (taskDone)
    assert result["choices"][1] == ["Finish task", "Deny…", "Edit…"]
    assert result["task_done"] == DONE["arguments"]["summary"]
    assert result["steps"][-1] == "finished"
    # store
    by_kind = {d["decision"]: d for d in decisions(store).values()}
    assert set(by_kind) == {"approve", "deny", "edit"}
    assert task_ends(store) == [DONE["arguments"]["summary"]]
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
    # :ContinualStart ran in ops.py's buffer: the task started with that file in view
    assert in_view(store) == ["src/calc/ops.py"]


def test_neovim_a_guard_on_the_favourite_call_offers_override_not_approve(
    workspace: Path, tmp_path: Path
) -> None:
    """The agent's only call (scripted) is blocked by a guard from an earlier correction:
    the automatic denial's retry candidates are all blocked too, so the reviewer is shown
    the call with the guard's reason. Approve is refused naming override, the code actions
    offer Override guard (never Approve), and :ContinualOverride runs it."""
    from continual_lsp.store import Store

    from .scripted import CALC_GUARD

    store, report = tmp_path / "store.sqlite3", tmp_path / "report.json"
    seeded = Store(store)
    guard_id = seeded.add_lane_item(CALC_GUARD)
    seeded.close()
    server = [sys.executable, "-m", "tests.server.launch", "--store", str(store)]
    env = editor_env(
        workspace,
        tmp_path,
        report,
        [*server, "--script", "override"],
        CONTINUAL_MODULE=str(REPO / "server" / "nvim" / "continual.lua"),
    )
    script = str(Path(__file__).parent / "nvim_guard.lua")
    argv = ["nvim", "--headless", "-u", "NONE", "-i", "NONE", "-c", "luafile " + script]
    proc, result = run_editor(argv, REPO, env, report, 240)
    assert proc.returncode == 0, f"{result.get('error')}\n{proc.stderr[-3000:]}"
    guard = CALC_GUARD["text"]
    reason = (
        f"No compliant retry among 6 candidates: 6 were blocked by a guard ({guard}). "
        "A guard blocks this call: edit it to show what you want, override the guard, or "
        "deny it again."
    )
    assert (result["tool"], result["blocked_by"]) == ("edit_lines", guard)
    assert result["note"] == reason
    assert any("is blocked by a guard: " + guard in m for m in result["messages"])
    assert [t.split(":")[0] for t in result["actions"]] == [
        "Override guard",
        "Deny with correction…",
        "Edit proposal…",
        "Show diff",
    ]
    assert "sum(values) // len(values)" in result["refused_disk"]  # approve ran nothing
    assert "return sum(values) / len(values)" in result["disk"]
    assert [i[2] for i in result["ledger"] if i[0] == guard_id] == [1]
    assert not result["task_done"]
    # The block was an automatic denial; the reviewer's override ran the call.
    assert sorted(d["decision"] for d in decisions(store).values()) == ["deny", "override"]
