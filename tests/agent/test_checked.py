"""A file change is checked before it is shown (issue 30 item 3): it parses, and with a
failing test run in the task, a candidate that turns it green is preferred.

The real embedded model forced to scripted calls (tests/server/scripted.py): a batch of
candidates is the next scripted call, so which candidate exists is known.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from continual_lsp.agent.agent import Agent
from continual_lsp.config import Settings
from continual_lsp.policy.base import Completion, SampleParams
from continual_lsp.tools.sandbox import bwrap_available
from tests.server.scripted import DONE, FIX_MEAN, WRONG_TEST, ForcedCallPolicy

# The changes tried against the task's test are the model's, unapproved: they run only
# in the sandbox (agent/trials.py).
pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(not bwrap_available()[0], reason="the bwrap sandbox cannot run here"),
]

BROKEN = {
    "tool": "write",
    "arguments": {"path": "hello.py", "content": "def hello():\n    print(f"},
}
HELLO = {
    "tool": "write",
    "arguments": {"path": "hello.py", "content": "def hello():\n    print('hi')\n"},
}
TESTS = "PYTHONPATH=src python3 -m pytest -q tests/test_ops.py"
RUN_TESTS = {"tool": "bash", "arguments": {"cmd": TESTS}}
# Parses, and leaves the test failing: `//` kept.
NOT_A_FIX = {
    "tool": "edit_lines",
    "arguments": {
        "path": "src/calc/ops.py",
        "start": 7,
        "end": 7,
        "content": "    return (sum(values) // len(values))\n",
    },
}


def _mean_line(content: str) -> dict[str, Any]:
    """FIX_MEAN's line, written as `content`."""
    return {"tool": "edit_lines", "arguments": {**FIX_MEAN["arguments"], "content": content}}


def _agent(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, calls: list[Any], **settings: Any
) -> Agent:
    config = Settings(
        enable_training=False,
        store_path=str(tmp_path / "store.sqlite3"),
        sandbox="bwrap",
        allow_unsandboxed=False,
        **settings,
    )
    return Agent(config, workspace, policy=ForcedCallPolicy(config, calls, model_and_tokenizer))


def test_a_change_that_does_not_parse_gives_way_to_one_that_does(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    agent = _agent(tmp_path, workspace, model_and_tokenizer, [BROKEN, HELLO])
    _, proposal = agent.start_task("Write hello.py with a hello() that prints hi")
    assert proposal is not None and proposal.call.arguments == HELLO["arguments"]
    assert proposal.checked == "parses"
    (replaced,) = [e["payload"] for e in agent.store.events(kind="invalid_replaced")]
    assert "hello.py not parsing (line 2" in replaced["error"]
    agent.close()


def test_a_change_no_candidate_can_fix_is_shown_marked(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    agent = _agent(tmp_path, workspace, model_and_tokenizer, [BROKEN])
    _, proposal = agent.start_task("Write hello.py with a hello() that prints hi")
    assert proposal is not None and proposal.call.arguments == BROKEN["arguments"]
    # First the model was told why, as for any call that cannot run, and tried again.
    statuses = [e["payload"]["status"] for e in agent.store.events(kind="proposal")]
    assert statuses == ["invalid"] * agent.settings.max_retries + ["pending"]
    assert proposal.preview is not None and proposal.preview.new_content.endswith("print(f")
    assert proposal.checked is not None and proposal.checked.startswith("does not parse: line 2")
    # the same mark when the reviewer's client asks again (continual/pending)
    (pending,) = agent.pending_proposals()
    assert pending.checked == proposal.checked
    agent.close()


def _after_a_failing_run(agent: Agent) -> Any:
    _, run = agent.start_task("Fix the failing test: the code, not the test")
    assert run is not None and run.call.arguments == RUN_TESTS["arguments"]
    outcome = agent.decide(run.id, "approve")
    assert outcome.result is not None and not outcome.result.ok  # test_mean fails
    return outcome.next_proposal


def test_with_a_failing_test_the_change_that_turns_it_green_is_shown(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    calls = [RUN_TESTS, NOT_A_FIX, FIX_MEAN]
    agent = _agent(tmp_path, workspace, model_and_tokenizer, calls, file_candidates=3)
    proposal = _after_a_failing_run(agent)
    # the model's call keeps `//`; the candidate tried after it passes and is shown
    assert proposal is not None and proposal.call.arguments == FIX_MEAN["arguments"]
    assert proposal.checked == f"`{TESTS}` passes with this change"
    (checked,) = [e["payload"] for e in agent.store.events(kind="change_checked")]
    assert checked["command"] == TESTS and checked["ran"] == 2 and checked["candidates"] == 2
    # tried on a copy: the workspace still has the bug until the reviewer approves
    assert "// len(values)" in (workspace / "src/calc/ops.py").read_text()
    agent.close()


def test_a_change_that_passes_is_shown_without_drawing_others(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's own change is tried first; others are sampled only if it fails."""

    def no_batch(*args: Any) -> list[Completion]:
        raise AssertionError("sampled other changes after the model's own passed")

    monkeypatch.setattr(ForcedCallPolicy, "sample_batch", no_batch)
    calls = [RUN_TESTS, FIX_MEAN]
    agent = _agent(tmp_path, workspace, model_and_tokenizer, calls, file_candidates=3)
    proposal = _after_a_failing_run(agent)
    assert proposal is not None and proposal.call.arguments == FIX_MEAN["arguments"]
    assert proposal.checked == f"`{TESTS}` passes with this change"
    (checked,) = [e["payload"] for e in agent.store.events(kind="change_checked")]
    assert checked["ran"] == 1 and checked["candidates"] == 1
    agent.close()


def test_no_candidate_passes_or_the_setting_is_off(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    calls = [RUN_TESTS, NOT_A_FIX]
    agent = _agent(tmp_path, workspace, model_and_tokenizer, calls, file_candidates=3)
    proposal = _after_a_failing_run(agent)
    assert proposal is not None and proposal.call.arguments == NOT_A_FIX["arguments"]
    assert proposal.checked == f"parses; `{TESTS}` still fails with it"
    agent.close()

    off = _agent(tmp_path / "off", workspace, model_and_tokenizer, calls, file_candidates=1)
    proposal = _after_a_failing_run(off)
    assert proposal is not None and proposal.checked == "parses"
    assert off.store.events(kind="change_checked") == []
    off.close()


def test_a_done_the_failing_test_contradicts_gives_way_to_a_change_that_passes(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The multi-step draw's commonest end: the tests fail, and the model says `done`.
    First the code the failing test imports is read in its place (the output names only
    the test; a read runs unasked); at the next `done`, changes sampled in its place
    are tried, and one that turns the test green is shown. They are drawn on the file
    the failure points at (a change elsewhere could not turn it green)."""
    batches: list[SampleParams] = []
    scripted_batch = ForcedCallPolicy.sample_batch

    def recorded(
        self: ForcedCallPolicy, prompt: list[int], params: SampleParams, n: int
    ) -> list[Completion]:
        batches.append(params)
        return scripted_batch(self, prompt, params, n)

    monkeypatch.setattr(ForcedCallPolicy, "sample_batch", recorded)
    calls = [RUN_TESTS, DONE, DONE, FIX_MEAN]
    agent = _agent(tmp_path, workspace, model_and_tokenizer, calls, file_candidates=3)
    proposal = _after_a_failing_run(agent)
    # The changes tried in place of `done` are drawn on the files the failure points at:
    # the module the test imports, and its package's __init__.
    (drawn,) = batches
    assert drawn.forbid is not None and drawn.tools is not None and "done" not in drawn.tools
    pointed = ["src/calc/ops.py", "src/calc/__init__.py"]
    assert drawn.forbid.files == drawn.forbid.write_paths == pointed
    (look,) = agent.store.events(kind="auto_approved")
    (why,) = [e["payload"] for e in agent.store.events(kind="looked_at_failure")]
    assert why == {"command": TESTS, "path": "src/calc/ops.py"}
    read = agent.store.proposal(look["proposal_id"])
    assert read is not None and read["tool"] == "read"
    assert read["arguments"] == {"path": "src/calc/ops.py"}
    assert proposal is not None and proposal.call.arguments == FIX_MEAN["arguments"]
    assert proposal.checked == f"`{TESTS}` passes with this change"
    assert proposal.note == f"in place of `done`: `{TESTS}` failed on its last run"
    (checked,) = [e["payload"] for e in agent.store.events(kind="change_checked")]
    assert checked["instead_of_done"] and checked["ran"] == 1
    agent.close()


@pytest.mark.parametrize("sampled", [NOT_A_FIX, WRONG_TEST], ids=["no-fix", "test-file"])
def test_a_done_is_shown_marked_when_no_change_passes(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, sampled: dict[str, Any]
) -> None:
    """Nothing unverified takes a `done`'s place; a change to the test itself (which
    would pass) is not tried."""
    calls = [RUN_TESTS, DONE, DONE, sampled]
    agent = _agent(tmp_path, workspace, model_and_tokenizer, calls, file_candidates=3)
    proposal = _after_a_failing_run(agent)  # the code under test read (unasked) first
    assert proposal is not None and proposal.call.tool == "done"
    assert proposal.checked == f"`{TESTS}` failed on its last run"
    (checked,) = [e["payload"] for e in agent.store.events(kind="change_checked")]
    assert checked["candidates"] == (sampled is NOT_A_FIX)
    agent.close()


def test_a_change_that_puts_back_what_an_approved_one_replaced_gives_way(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    """After a fix the small model often writes the old line back (3 of 11 unfinished
    agent-skill tasks): that call cannot run, and a runnable sample is shown instead."""
    # the old line, indented otherwise (as the model often puts it back)
    revert = _mean_line("\treturn sum(values)  // len(values)\n")
    agent = _agent(tmp_path, workspace, model_and_tokenizer, [FIX_MEAN, revert, RUN_TESTS])
    _, fix = agent.start_task("Fix mean()")
    assert fix is not None and fix.call.arguments == FIX_MEAN["arguments"]
    nxt = agent.decide(fix.id, "approve").next_proposal
    assert nxt is not None and nxt.call.arguments == RUN_TESTS["arguments"]
    (replaced,) = [e["payload"] for e in agent.store.events(kind="invalid_replaced")]
    assert replaced["call"]["arguments"] == revert["arguments"]
    assert "would undo a change to src/calc/ops.py made in this task" in replaced["error"]
    assert "/ len(values)" in (workspace / "src/calc/ops.py").read_text()
    assert "//" not in (workspace / "src/calc/ops.py").read_text()
    agent.close()


def test_a_retry_after_a_correction_may_put_a_change_back(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    """The reviewer may ask for exactly that: the retry's candidates are not screened
    for it."""
    revert = _mean_line("    return sum(values) // len(values)\n")
    agent = _agent(tmp_path, workspace, model_and_tokenizer, [FIX_MEAN, RUN_TESTS, revert])
    _, fix = agent.start_task("Fix mean()")
    assert fix is not None
    run = agent.decide(fix.id, "approve").next_proposal
    assert run is not None and run.call.arguments == RUN_TESTS["arguments"]
    retry = agent.decide(run.id, "deny", correction="Put mean() back as it was.").next_proposal
    assert retry is not None and retry.call.arguments == revert["arguments"]
    agent.close()


def test_a_change_at_the_wrong_depth_is_shown_re_indented(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    flat = _mean_line("return sum(values) / len(values)\n")
    agent = _agent(tmp_path, workspace, model_and_tokenizer, [flat])
    _, proposal = agent.start_task("Fix mean()")
    assert proposal is not None and proposal.call.arguments == FIX_MEAN["arguments"]
    assert proposal.note is not None and proposal.note.startswith("re-indented to fit the file")
    assert proposal.checked == "parses"
    assert agent.store.events(kind="invalid_replaced") == []
    agent.close()


def test_a_retry_at_the_wrong_depth_is_a_candidate_re_indented(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    """The retry's candidates are screened the same way: the one that follows the
    correction is not dropped for its indentation."""
    flat = _mean_line("return sum(values) / len(values)\n")
    agent = _agent(tmp_path, workspace, model_and_tokenizer, [NOT_A_FIX, flat])
    _, first = agent.start_task("Fix mean()")
    assert first is not None and first.call.arguments == NOT_A_FIX["arguments"]
    retry = agent.decide(first.id, "deny", correction="Use / for the mean.").next_proposal
    assert retry is not None and retry.call.arguments == FIX_MEAN["arguments"]
    assert retry.note is not None and "re-indented" in retry.note
    agent.close()


RUN = "python3 run.py"
RUN_IT = {"tool": "bash", "arguments": {"cmd": RUN}}


def _renamed(new: str) -> dict[str, Any]:
    """run.py opening `data/<new>` instead of the missing data/input.txt."""
    return {"tool": "edit", "arguments": {"path": "run.py", "old": "input.txt", "new": new}}


@pytest.mark.parametrize(
    ("then", "event"),
    [(DONE, "looked_at_failure"), (_renamed("input_new.txt"), "grounded")],
    ids=["done", "a-guess"],
)
def test_a_file_the_check_finds_missing_has_its_folder_listed_first(
    tmp_path: Path,
    workspace: Path,
    model_and_tokenizer: Any,
    then: dict[str, Any],
    event: str,
) -> None:
    """The program opens a file that is not there, beside one that is under another
    name: in place of the model's `done`, or of its change that guesses another name,
    the folder is listed (a glob runs unasked); the model's next change is tried."""
    (workspace / "data").mkdir()
    (workspace / "data" / "input_2024.txt").write_text("1\n2\n")
    (workspace / "run.py").write_text(
        "from pathlib import Path\n\nprint(len(Path('data/input.txt').read_text()))\n"
    )
    calls = [RUN_IT, then, _renamed("input_2024.txt")]
    agent = _agent(tmp_path, workspace, model_and_tokenizer, calls, file_candidates=2)
    _, run = agent.start_task(f"`{RUN}` fails every time. Please make it work.")
    assert run is not None and run.call.arguments == RUN_IT["arguments"]
    outcome = agent.decide(run.id, "approve")
    assert outcome.result is not None and "No such file" in outcome.result.output
    (listed,) = agent.store.events(kind="auto_approved")
    glob = agent.store.proposal(listed["proposal_id"])
    assert glob is not None and glob["tool"] == "glob"
    assert glob["arguments"] == {"pat": "data/*"}
    assert len(agent.store.events(kind=event)) == 1
    fix = outcome.next_proposal
    assert fix is not None and fix.call.arguments == _renamed("input_2024.txt")["arguments"]
    assert fix.checked == f"`{RUN}` passes with this change"
    agent.close()
