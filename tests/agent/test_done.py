"""How a task ends (issue 30): `done` is a proposal like any other; a repeat is not an end.

The real embedded model forced to scripted calls (tests/server/scripted.py), so the
store, the logprobs and the candidates are real; only the choice of call is scripted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from continual_lsp.agent.agent import Agent
from continual_lsp.config import Settings
from continual_lsp.protocol import TaskDoneNotification
from tests.agent.support import record_jobs
from tests.server.scripted import DONE, FIX_MEAN, RUN_TESTS, ForcedCallPolicy

pytestmark = pytest.mark.model


class _Ends:
    """A listener that keeps the taskDone notifications (the rest is ignored)."""

    def __init__(self) -> None:
        self.done: list[TaskDoneNotification] = []

    def on_task_done(self, note: TaskDoneNotification) -> None:
        self.done.append(note)

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _agent(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, calls: list[dict[str, Any]]
) -> tuple[Agent, ForcedCallPolicy, list[list[str] | None], _Ends]:
    """An agent on a scripted policy that records the tools each single sample allowed."""
    settings = Settings(enable_training=False, store_path=str(tmp_path / "store.sqlite3"))
    script = ForcedCallPolicy(settings, calls, model_and_tokenizer)
    offered: list[list[str] | None] = []
    scripted = script.sample

    def sample(prompt_tokens: list[int], params: Any) -> Any:
        offered.append(params.tools)
        return scripted(prompt_tokens, params)

    script.sample = sample  # type: ignore[method-assign]
    ends = _Ends()
    return Agent(settings, workspace, policy=script, listener=ends), script, offered, ends  # type: ignore[arg-type]


def test_approving_done_ends_the_task_with_the_models_summary(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    agent, _, _, ends = _agent(tmp_path, workspace, model_and_tokenizer, [FIX_MEAN, DONE])
    task_id, fix = agent.start_task("Fix mean() in src/calc/ops.py")
    assert fix is not None and fix.call.tool == "edit_lines"
    finish = agent.decide(fix.id, "approve").next_proposal
    # Shown like any proposal: nothing to preview, not read-only, waiting for the reviewer.
    assert finish is not None and finish.call.tool == "done"
    assert finish.preview is None and not finish.read_only
    assert finish.call.arguments == DONE["arguments"]
    assert agent.store.task(task_id)["status"] != "done"
    outcome = agent.decide(finish.id, "approve")
    summary = DONE["arguments"]["summary"]
    assert outcome.task_done == summary and outcome.next_proposal is None
    assert ends.done == [TaskDoneNotification(task_id=task_id, summary=summary)]
    assert agent.store.task(task_id)["status"] == "done"
    (stored,) = agent.store.events(kind="task_status")
    assert stored["payload"] == {"status": "done", "summary": summary}
    agent.close()


def test_a_repeat_gives_way_and_the_last_try_may_only_be_done(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    """After the fix ran, the model proposes it twice more: neither ends the task; the
    third try is decoded with the grammar narrowed to `done`."""
    calls = [FIX_MEAN, FIX_MEAN, FIX_MEAN, DONE]
    agent, _, offered, ends = _agent(tmp_path, workspace, model_and_tokenizer, calls)
    _, fix = agent.start_task("Fix mean() in src/calc/ops.py")
    assert fix is not None
    finish = agent.decide(fix.id, "approve").next_proposal
    assert finish is not None and finish.call.tool == "done"
    assert offered == [None, None, None, ["done"]]
    assert len(agent.store.events(kind="repeat_of_executed")) == 2
    assert ends.done == []
    agent.close()


def test_a_task_that_keeps_repeating_without_done_stops_and_says_so(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    """`done` not allowed: the last try is not narrowed, and three repeats stop the task
    with a reason that names the repeat, not a claim that the work is done."""
    settings = Settings(
        enable_training=False,
        store_path=str(tmp_path / "store.sqlite3"),
        allowed_tools=["edit_lines", "bash"],
    )
    script = ForcedCallPolicy(settings, [RUN_TESTS], model_and_tokenizer)
    ends = _Ends()
    agent = Agent(settings, workspace, policy=script, listener=ends)  # type: ignore[arg-type]
    _, run = agent.start_task("Run the tests")
    assert run is not None
    outcome = agent.decide(run.id, "approve")
    assert outcome.task_done == "stopped: the model only repeated calls already run"
    assert len(ends.done) == 1
    agent.close()


def test_denying_done_is_a_correction_and_the_retry_acts(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any, monkeypatch: Any
) -> None:
    """'Not done' is denied like any call: a learning step whose demonstration is the
    retry, and the retry's candidates may not finish again."""
    agent, script, _, ends = _agent(
        tmp_path, workspace, model_and_tokenizer, [FIX_MEAN, DONE, RUN_TESTS]
    )
    jobs = record_jobs(agent, monkeypatch)
    batches: list[list[str] | None] = []
    batch = script.sample_batch

    def sample_batch(prompt_tokens: list[int], params: Any, n: int) -> Any:
        batches.append(params.tools)
        return batch(prompt_tokens, params, n)

    script.sample_batch = sample_batch  # type: ignore[method-assign]
    task_id, fix = agent.start_task("Fix mean() in src/calc/ops.py")
    assert fix is not None
    finish = agent.decide(fix.id, "approve").next_proposal
    assert finish is not None and finish.call.tool == "done"
    outcome = agent.decide(finish.id, "deny", correction="Not done: run the tests first.")
    retry = outcome.next_proposal
    assert retry is not None and retry.call.tool == "bash" and outcome.task_done is None
    assert batches and all(tools is not None and "done" not in tools for tools in batches)
    deny = next(j for j in jobs if j["proposal"] == finish.id)
    assert deny["signal"] == "deny" and deny["demo"] is not None
    assert deny["demo"].tool == "bash"
    assert agent.store.proposal(finish.id)["status"] == "deny"
    assert agent.store.task(task_id)["status"] != "done" and ends.done == []
    agent.close()
