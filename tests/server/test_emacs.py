"""A real headless Emacs (Debian's emacs-nox + elpa-eglot) driving the server through
eglot's own functions: with the shipped module (server/emacs/continual.el) and as a
plain eglot client that knows nothing of continual/*."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from .harness import REPO, decisions, editor_env, in_view, run_editor, task_ends
from .scripted import DONE

pytestmark = [
    pytest.mark.emacs,
    pytest.mark.skipif(
        shutil.which("emacs") is None or not Path("/usr/share/emacs/site-lisp/elpa").is_dir(),
        reason="emacs and eglot are not installed (scripts/setup.sh --test installs "
        "emacs-nox and elpa-eglot)",
    ),
]

DENY_TEXT = "Never weaken a test; fix the code instead."


def run_emacs(
    workspace: Path,
    tmp_path: Path,
    script: str,
    *,
    module: bool,
    flow: str | None = None,
    training: bool = True,
) -> dict[str, Any]:
    """Emacs starts the server itself (as eglot does); its stderr goes to a file, which
    eglot would otherwise swallow. A private HOME, the shared model cache. `flow` names
    one of emacs_flow.el's module flows other than the default."""
    store, report, log = (
        tmp_path / "store.sqlite3",
        tmp_path / "report.json",
        tmp_path / "server.log",
    )
    server = [
        sys.executable,
        "-m",
        "tests.server.launch",
        "--store",
        str(store),
        "--script",
        script,
    ]
    if module and training:
        server.append("--training")  # the denial takes a real SDPO step
    command = ["sh", "-c", 'cd "$1" && shift && exec "$@" 2>>"$0"', str(log), str(REPO), *server]
    env = editor_env(workspace, tmp_path, report, command)
    if module:
        env["CONTINUAL_MODULE"] = str(REPO / "server" / "emacs" / "continual.el")
    if flow:
        env["CONTINUAL_FLOW"] = flow
    flow = str(Path(__file__).parent / "emacs_flow.el")
    proc, result = run_editor(["emacs", "--batch", "-Q", "-l", flow], workspace, env, report, 420)
    server_log = log.read_text()[-3000:] if log.exists() else ""
    assert proc.returncode == 0 and result.get("ok") is True, (
        f"{result.get('error')}\n{result}\n--- emacs\n{proc.stderr[-3000:]}\n--- server\n{server_log}"
    )
    return result


def test_emacs_module_deny_learn_approve_by_code_action(workspace: Path, tmp_path: Path) -> None:
    result = run_emacs(workspace, tmp_path, "emacs", module=True)
    assert result["steps"] == [
        "proposal",
        "denied",
        "approved by code action",
        "approved a file not open",
        "status",
        "finished",
    ]
    # the first proposal came in the startTask response
    assert result["first_tool"] == "edit_lines"
    assert result["first_uri"].endswith("tests/test_ops.py")
    # the denial trained: a real step, then the retry on the file the reviewer has open
    assert result["learned_step"] >= 1 and result["learned_seconds"] > 0
    assert result["retry_tool"] == "edit_lines" and result["retry_uri"].endswith("src/calc/ops.py")
    # eglot's code-action path: the action is the command; the server's versioned
    # applyEdit changed the buffer, the agent wrote the file, the buffer is settled
    assert any(t.startswith("Approve") for t in result["actions"])
    assert result["approve_buffer"] == "    return sum(values) / len(values)"
    assert "return sum(values) / len(values)" in result["approved_disk"]
    assert (workspace / "src/calc/ops.py").read_text() == result["approved_disk"]
    assert result["approve_modified"] is False
    # a file not open in Emacs is written by the server
    assert result["changes_tool"] == "write" and result["changes_open"] is False
    assert result["changes_disk"] == "- mean() returns a float\n"
    # status and pending agree on what waits
    assert result["bash_tool"] == "bash" and result["status_pending"] is True
    assert result["pending_ids"] == [result["bash_id"]]
    assert result["training_steps"] >= 1
    # the command ran; the agent's done shows its summary (no diff), and approving it
    # ended the task: the module received continual/taskDone with that summary
    summary = DONE["arguments"]["summary"]
    assert result["done_tool"] == "done" and summary in result["done_shown"]
    assert result["task_done"] == summary
    assert task_ends(tmp_path / "store.sqlite3") == [summary]
    # the store: deny with the correction, four approvals; the weakened test never written
    kinds = sorted(d["decision"] for d in decisions(tmp_path / "store.sqlite3").values())
    assert kinds == ["approve", "approve", "approve", "approve", "deny"]
    assert "== 1.5" in (workspace / "tests/test_ops.py").read_text()
    # the task started with the buffer's file in view
    assert in_view(tmp_path / "store.sqlite3") == ["src/calc/ops.py"]


def test_emacs_plain_client_diagnostics_code_actions_and_message_request(
    workspace: Path, tmp_path: Path
) -> None:
    result = run_emacs(workspace, tmp_path, "plain", module=False)
    assert result["steps"] == ["bash approved", "approved by code action"]
    # bash arrives as window/showMessageRequest, answered in eglot's own prompt
    assert "Proposed bash: run `echo tests-ran`" in result["bash_prompt"]
    assert result["bash_choices"] == ["Approve", "Deny…", "Edit…"]
    # the file proposal as a diagnostic, in flymake too, then the four code actions
    assert result["diagnostics"][0].startswith("Proposed edit_lines: replace line 7")
    assert any("Proposed edit_lines" in text for text in result["flymake"])
    assert [t.split(":")[0] for t in result["actions"]] == [
        "Approve",
        "Deny with correction…",
        "Edit proposal…",
        "Show diff",
    ]
    # approved: eglot asked before the server's edit (its default), buffer and disk agree
    assert len(result["confirmations"]) == 1
    assert result["approve_buffer"] == "    return sum(values) / len(values)"
    assert "return sum(values) / len(values)" in (workspace / "src/calc/ops.py").read_text()
    kinds = sorted(d["decision"] for d in decisions(tmp_path / "store.sqlite3").values())
    assert kinds == ["approve", "approve"]


SCOPED = "Change only the line with the bug in ops.py; use edit_lines, do not rewrite the file."


def test_emacs_a_task_scoped_correction_then_the_one_line_fix_approved_by_code_action(
    workspace: Path, tmp_path: Path
) -> None:
    """Issue 31: the agent rewrote the whole file; the reviewer's correction is about this
    change only, so it becomes no guard, and the one-line fix is shown, approvable, and
    approved through eglot's code action."""
    result = run_emacs(workspace, tmp_path, "scoped", module=True, flow="scoped", training=False)
    assert result["steps"] == [
        "proposal",
        "denied",
        "approved by code action",
        "ledger",
        "promoted",
    ]
    assert result["first_tool"] == "write"
    assert result["retry_tool"] == "edit_lines"
    assert result["retry_content"] == "    return sum(values) / len(values)\n"
    assert result["retry_blocked"] is False  # no guard stands in the way
    assert result["actions"][0].startswith("Approve: ")
    assert result["approve_buffer"] == "    return sum(values) / len(values)"
    assert (workspace / "src/calc/ops.py").read_text() == result["approved_disk"]
    assert "# BUG: integer division truncates the mean" in result["approved_disk"]  # one line
    [(item_id, _, lane, _, scoped, active)] = [i for i in result["ledger"] if i[1] == SCOPED]
    assert (lane, scoped, active) == ("NONE", True, True)
    assert not [i for i in result["ledger"] if i[2] == "CODE"]
    # Promoted from Emacs (continual/promote): a standing item; the task-scoped one retires.
    assert result["promoted_lane"] in ("CODE", "CONTEXT", "WEIGHTS")
    after = {i[0]: i for i in result["ledger_after"]}
    assert after[item_id][5] is False and after[result["promoted_id"]][5] is True
    kinds = sorted(d["decision"] for d in decisions(tmp_path / "store.sqlite3").values())
    assert kinds == ["approve", "deny"]


def test_emacs_a_blocked_proposal_is_overridden_from_the_code_action(
    workspace: Path, tmp_path: Path
) -> None:
    """A guard blocks the fix: the code actions offer Override guard, not Approve; approve
    is refused (module and server) with the buffer untouched; the override runs the call
    and the ledger counts it."""
    from continual_lsp.store import Store

    from .scripted import CALC_GUARD

    store = Store(tmp_path / "store.sqlite3")
    guard_id = store.add_lane_item(CALC_GUARD)
    store.close()
    result = run_emacs(
        workspace, tmp_path, "override", module=True, flow="override", training=False
    )
    guard = CALC_GUARD["text"]
    assert result["steps"] == ["blocked proposal", "overridden by code action", "ledger"]
    assert (result["tool"], result["blocked_by"]) == ("edit_lines", guard)
    assert [t.split(":")[0] for t in result["actions"]] == [
        "Override guard",
        "Deny with correction…",
        "Edit proposal…",
        "Show diff",
    ]
    assert "continual-override" in result["module_refused"]
    assert 'override the guard (decision "override")' in result["server_refused"]
    assert result["refused_buffer"] == "    return sum(values) // len(values)"
    assert result["override_buffer"] == "    return sum(values) / len(values)"
    assert result["override_modified"] is False
    assert (workspace / "src/calc/ops.py").read_text() == result["override_disk"]
    assert result["next_tool"] == "bash"
    [(_, _, lane, overridden, _, _)] = [i for i in result["ledger"] if i[0] == guard_id]
    assert (lane, overridden) == ("CODE", 1)
    kinds = sorted(d["decision"] for d in decisions(tmp_path / "store.sqlite3").values())
    assert kinds == ["deny", "override"]
