"""A change put where the task says the work is (agent/grounding.py): the rule's parts on
a workspace, and the agent showing the moved write or the look (real model, scripted
calls)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from continual_lsp.agent import grounding
from continual_lsp.agent.agent import Agent
from continual_lsp.config import Settings
from continual_lsp.tools.base import ToolCall
from continual_lsp.tools.runner import ToolRunner
from tests.server.scripted import DONE, ForcedCallPolicy

CREATE = "Create src/calc/stats.py with a function median() returning 0."
DEBUG_LINE = "mean() prints a leftover debugging line; take it out of total_count too."


@pytest.fixture
def runner(workspace: Path) -> ToolRunner:
    (workspace / "src" / "calc" / "counts.py").write_text("def total_count(xs):\n    return 0\n")
    return ToolRunner(workspace, Settings(sandbox="none", allow_unsandboxed=True))


def _write(path: str, content: str = "def median():\n    return 0\n") -> ToolCall:
    return ToolCall(tool="write", arguments={"path": path, "content": content})


def _lines(path: str) -> ToolCall:
    return ToolCall(
        tool="edit_lines", arguments={"path": path, "start": 1, "end": 1, "content": "x"}
    )


def test_names_are_code_names_not_words_or_paths() -> None:
    text = (
        "Fix mean() and getValue in src_lib/x_y.py; the parse_date helper and MAX_ROWS too."
        " See README, JSON and the HTTP docs. Thanks"
    )
    assert grounding.named_names(text) == ["mean", "getValue", "parse_date", "MAX_ROWS"]


@pytest.mark.parametrize(
    ("text", "path", "moved"),
    [
        (CREATE, "src/calc/other.py", "src/calc/stats.py"),
        ("Add a module under src/calc/ with median().", "lib/stats.py", "src/calc/stats.py"),
        # already where the task says, or nothing new to put it in: left as written
        (CREATE, "src/calc/stats.py", None),
        ("Add a module under src/calc/ with median().", "src/calc/m.py", None),
        ("Fix mean() in src/calc/ops.py", "src/calc/other.py", None),
        ("Write median() somewhere.", "src/calc/other.py", None),
    ],
)
def test_a_new_file_goes_where_the_task_names_one(
    runner: ToolRunner, text: str, path: str, moved: str | None
) -> None:
    got = grounding.moved_write(runner, text, _write(path))
    assert (got.arguments["path"] if got else None) == moved
    if got is not None:
        assert got.arguments["content"] == _write(path).arguments["content"]


def test_an_existing_file_is_never_overwritten_by_a_move(runner: ToolRunner) -> None:
    call = _write("src/calc/new.py")
    assert grounding.moved_write(runner, "Add median() to src/calc/ops.py", call) is None


def test_a_change_away_from_what_the_task_names_waits_for_a_look(runner: ToolRunner) -> None:
    blind = _lines("README.md")
    shown = runner.preview(blind)
    # where the names are defined, in the order the task names them; once each is seen,
    # the model's change stands
    assert grounding.place_to_look(runner, DEBUG_LINE, blind, shown, set()) == "src/calc/ops.py"
    seen = {"src/calc/ops.py"}
    assert grounding.place_to_look(runner, DEBUG_LINE, blind, shown, seen) == "src/calc/counts.py"
    seen.add("src/calc/counts.py")
    assert grounding.place_to_look(runner, DEBUG_LINE, blind, shown, seen) is None


@pytest.mark.parametrize(
    "call",
    [
        # on the file that defines the name, or one the task names
        ToolCall(tool="edit", arguments={"path": "src/calc/ops.py", "old": "//", "new": "/"}),
        # a new file whose text uses the name the task mentions (a test of it)
        _write("tests/test_counts.py", "from calc.counts import total_count\n"),
        # not a change
        ToolCall(tool="read", arguments={"path": "README.md"}),
    ],
)
def test_a_change_on_or_about_the_named_place_stands(runner: ToolRunner, call: ToolCall) -> None:
    shown = runner.preview(call) if call.tool != "read" else None
    assert grounding.place_to_look(runner, DEBUG_LINE, call, shown, set()) is None


@pytest.mark.parametrize(
    ("text", "call", "look"),
    [
        # a constant the task names, set in a new file instead of where it is defined
        ("Change LIMIT_ROWS so it equals 20.", _write("LIMIT_ROWS.txt", "20"), "limits.py"),
        # the function the task names, defined again in a new file
        (
            "total_count never returns its result.",
            _write("count.txt", "def total_count():\n"),
            "counts.py",
        ),
        # redefined where it is defined: the change stands
        (
            "total_count never returns its result.",
            _write("src/calc/counts.py", "def total_count(xs):\n    return len(xs)\n"),
            None,
        ),
    ],
)
def test_a_new_definition_of_what_the_workspace_defines_waits_for_a_look_at_it(
    runner: ToolRunner, text: str, call: ToolCall, look: str | None
) -> None:
    (runner.root / "src" / "calc" / "limits.py").write_text("LIMIT_ROWS = 10\n")
    shown = runner.preview(call)
    expected = None if look is None else f"src/calc/{look}"
    assert grounding.place_to_look(runner, text, call, shown, set()) == expected


def test_a_task_that_names_nothing_leaves_every_change(runner: ToolRunner) -> None:
    blind = _write("notes.txt", "hello")
    shown = runner.preview(blind)
    assert grounding.place_to_look(runner, "The tests fail; fix it.", blind, shown, set()) is None


@pytest.mark.model
def test_the_agent_shows_the_write_where_the_task_says_and_the_look(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    settings = Settings(
        enable_training=False,
        store_path=str(tmp_path / "store.sqlite3"),
        autonomy="manual",
    )
    elsewhere = {"tool": "write", "arguments": _write("src/calc/other.py").arguments}
    blind = {
        "tool": "edit_lines",
        "arguments": {"path": "README.md", "start": 1, "end": 1, "content": "x"},
    }
    script = ForcedCallPolicy(settings, [elsewhere, DONE, blind, blind], model_and_tokenizer)
    agent = Agent(settings, workspace, policy=script)
    _, first = agent.start_task(CREATE)
    assert first is not None and first.call == _write("src/calc/stats.py")
    assert first.note is not None and "src/calc/other.py" in first.note
    (stored,) = agent.store.events(kind="grounded")[:1]
    assert stored["payload"]["call"]["arguments"]["path"] == "src/calc/other.py"
    finish = agent.decide(first.id, "approve").next_proposal
    assert finish is not None and finish.call.tool == "done"
    agent.decide(finish.id, "approve")
    assert (workspace / "src/calc/stats.py").is_file()
    assert not (workspace / "src/calc/other.py").exists()

    _, look = agent.start_task("mean() truncates; fix it.")
    assert look is not None
    assert look.call == ToolCall(tool="read", arguments={"path": "src/calc/ops.py"})
    after = agent.decide(look.id, "approve").next_proposal
    # seen now: the model's own change is shown as it wrote it
    assert after is not None and after.call.tool == "edit_lines"
    assert [e["payload"]["instead"]["tool"] for e in agent.store.events(kind="grounded")] == [
        "write",
        "read",
    ]
    agent.close()


@pytest.mark.model
def test_a_change_in_place_of_one_that_cannot_run_is_grounded_too(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    """The model's call cannot run (a line far past the end); the runnable sample shown
    in its place is away from what the task names, so the look comes first."""
    settings = Settings(
        enable_training=False, store_path=str(tmp_path / "store.sqlite3"), autonomy="manual"
    )
    past_end = {
        "tool": "edit_lines",
        "arguments": {"path": "README.md", "start": 90, "end": 90, "content": "x"},
    }
    blind = {**past_end, "arguments": {**past_end["arguments"], "start": 1, "end": 1}}
    script = ForcedCallPolicy(settings, [past_end, blind], model_and_tokenizer)
    agent = Agent(settings, workspace, policy=script)
    _, look = agent.start_task("mean() truncates; fix it.")
    assert look is not None
    assert look.call == ToolCall(tool="read", arguments={"path": "src/calc/ops.py"})
    assert len(agent.store.events(kind="invalid_replaced")) == 1
    agent.close()
