"""bench/agent_skill.py's multi-step tasks (issue 30): they fail as given, the intended
fix makes them pass, a test edited to pass is not finished, and they share no name or
path with the curriculum. No model: the agent is not run here."""

from __future__ import annotations

import random
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from bench.agent_skill import (
    ended_by,
    finished,
    main,
    multi_tasks,
    run_root,
    skill_tasks,
    summarise,
    task_dir,
    unparsable,
)
from continual_lsp.curriculum.episodes import TOOL_SETTINGS, execute, write_workspace
from continual_lsp.curriculum.exercises import Builder, Exercise, load_vocab
from continual_lsp.tools.base import FILE_CHANGING_TOOLS, ToolCall
from continual_lsp.tools.runner import ToolRunner


def _fails(s: Exercise, ws: Path) -> bool:
    assert s.check is not None
    done = subprocess.run(s.check, shell=True, cwd=ws, capture_output=True, check=False)
    return done.returncode != 0


@pytest.mark.slow
def test_the_multi_step_tasks_fail_as_given_and_pass_once_fixed(tmp_path: Path) -> None:
    tasks = multi_tasks(24)
    assert Counter(s.kind for s in tasks) == {k: 6 for k in Builder.MULTI_STEP_KINDS}
    assert {s.language for s in tasks} == {"py", "js"}
    assert len(skill_tasks(36)) == 36  # the one-step tasks are kept
    for i, s in enumerate(tasks[:8]):
        ws = tmp_path / str(i) / "ws"
        write_workspace(ws, s.files)
        assert _fails(s, ws), s.task
        assert not finished(s, ws, [])
        runner = ToolRunner(ws, TOOL_SETTINGS)
        changes = [c for c in s.plan if c.tool in FILE_CHANGING_TOOLS]
        for c in changes:
            execute(runner, c)
        assert finished(s, ws, changes), s.task
        assert unparsable(s.files, ws) == []


def test_a_test_edited_to_pass_is_not_finished(tmp_path: Path) -> None:
    s = next(s for s in multi_tasks(8) if s.kind == "failing_test" and s.language == "py")
    ws = tmp_path / "ws"
    write_workspace(ws, s.files)
    (test,) = [p for p in s.files if p.startswith("tests/")]
    (ws / test).write_text("def test_nothing():\n    assert True\n", encoding="utf-8")
    assert not _fails(s, ws)  # the check passes ...
    assert not finished(s, ws, [])  # ... but nothing was fixed


def test_a_change_that_breaks_parsing_is_counted(tmp_path: Path) -> None:
    s = next(s for s in multi_tasks(8) if s.language == "py")
    ws = tmp_path / "ws"
    write_workspace(ws, s.files)
    (ws / s.target).write_text("def f(:\n", encoding="utf-8")
    (ws / "new.json").write_text("{", encoding="utf-8")
    assert unparsable(s.files, ws) == sorted([s.target, "new.json"])


def test_how_a_task_ended_and_the_evidence_keys() -> None:
    done = ToolCall(tool="done", arguments={"summary": "fixed"})
    read = ToolCall(tool="read", arguments={"path": "a.py"})
    assert ended_by("fixed", [read, done]) == "done"
    assert ended_by("stopped: the model only repeated calls already run", [read]) == "repeat"
    assert ended_by("reached the turn limit (8)", [read]) == "turn_limit"
    assert ended_by(None, [read]) == "open"
    row = {"finished": True, "on_target": True, "ended_by": "done", "unparsable": []}
    bad = {"finished": False, "on_target": False, "ended_by": "repeat", "unparsable": ["x.py"]}
    kept_going = {"looks_at_failure": 1, "done_replaced_by_a_passing_change": 1}
    got = summarise([row, bad], [dict(row, ended_by="turn_limit", **kept_going)])
    assert got == {
        "one_step": {"finished": 0.5, "on_target": 0.5},
        "multi_step": {
            "finished": 1.0,
            "tasks_with_a_look_at_failure": 1,
            "done_replaced_by_a_passing_change": 1,
        },
        "ended_by_done": 0.5,
        "ended_by_repeat": 1,
        "unparsable_after_approve": 1,
    }
    # A part not run is not a 0.
    assert summarise([], [dict(row, **kept_going)])["one_step"] == {
        "finished": None,
        "on_target": None,
    }


def test_the_multi_step_tasks_share_no_name_or_path_with_the_curriculum() -> None:
    """Held out by construction: the bench's functions, stems and folders are not the
    curriculum's, so no multi-step workspace path is one the curriculum writes."""
    curriculum: set[str] = set()
    for seed in range(3):
        builder = Builder(load_vocab(), random.Random(seed))
        for kind in Builder.MULTI_STEP_KINDS * 6:
            curriculum |= set(builder.exercise(kind).files)
    code = (".py", ".js")
    bench = {p for s in multi_tasks(24) for p in s.files if p.endswith(code)}
    assert bench and not (bench - {"tests/__init__.py"}) & curriculum
    fns = set(load_vocab()["functions"])
    assert not {s.facts["fn"] for s in multi_tasks(24)} & fns


def test_a_run_that_would_measure_nothing_fails_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "agent_skill.json"
    argv = ["--tasks", "0", "--multi-tasks", "0", "--skill-only", "--out", str(out)]
    assert main(argv) == 1
    assert not out.exists()


def test_every_task_of_a_run_works_at_one_path_that_a_second_run_cannot_take(
    tmp_path: Path,
) -> None:
    """Tracebacks carry the workspace's absolute path into the prompt: the same path for
    every task and every run keeps two runs of the same code token for token alike."""
    with run_root(tmp_path / "run") as root:
        with task_dir(root) as first:
            (first / "left.txt").write_text("from the task before")
        with task_dir(root) as second:
            assert second == first
            assert not (second / "left.txt").exists()
        with pytest.raises(SystemExit, match="--workdir"), run_root(tmp_path / "run"):
            pass
    with run_root(tmp_path / "run"):  # released when the run ends
        pass


def test_development_draws_differ_and_the_first_is_the_one_measured_before() -> None:
    first, again, second = skill_tasks(6, True), skill_tasks(6, True, 0), skill_tasks(6, True, 1)
    assert [s.task for s in first] == [s.task for s in again]
    assert [s.task for s in first] != [s.task for s in second]
    assert [s.task for s in multi_tasks(4, True)] != [s.task for s in multi_tasks(4, True, 1)]
