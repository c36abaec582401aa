"""The Agent on the real embedded model, real tools and a real SQLite store.

Training is off here (tests/learning covers the step); `allowed_tools` narrows the
grammar so the real model proposes the kind of call a test needs.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from continual_lsp.agent import retry
from continual_lsp.agent.agent import Agent
from continual_lsp.agent.calls import seen_paths
from continual_lsp.agent.errors import AgentError
from continual_lsp.config import Settings
from continual_lsp.store import Store
from continual_lsp.tools.base import ToolCall
from tests.agent.support import make_agent, record_jobs

pytestmark = pytest.mark.model


def test_write_proposal_is_previewed_then_approved(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    from continual_lsp.policy.local.local_policy import LocalPolicy

    # The prompt lists the tools the grammar allows, as it does when agent and policy
    # share one Settings (the shared fixture's prompt lists every tool and done).
    narrow = Settings(enable_training=False, allowed_tools=["write"])
    policy = LocalPolicy(narrow, model_and_tokenizer)
    agent = make_agent(tmp_path, workspace, policy, allowed_tools=["write"])
    _, proposal = agent.start_task("Create notes.txt that says hello")
    assert proposal is not None and proposal.call.tool == "write"
    assert proposal.preview is not None and proposal.preview.diff
    target = workspace / proposal.preview.path
    before = target.read_text() if target.exists() else None
    # Nothing touched disk yet.
    assert (target.read_text() if target.exists() else None) == before
    outcome = agent.decide(proposal.id, "approve")
    assert outcome.ok and outcome.result is not None and outcome.result.ok
    assert target.read_text() == proposal.preview.new_content
    events = [e["kind"] for e in agent.store.events(proposal_id=proposal.id)]
    # The decision is in the log before the tool's result.
    assert events.index("decision") < events.index("tool_result")
    agent.close()


def test_a_call_that_cannot_run_is_not_shown(tmp_path: Path, workspace: Path, policy: Any) -> None:
    agent = make_agent(tmp_path, workspace, policy, allowed_tools=["edit_lines"], max_turns=4)
    _, proposal = agent.start_task("Fix mean() in src/calc/ops.py")
    # Whatever the model proposed, what reaches the reviewer has a preview (it can run).
    assert proposal is None or proposal.preview is not None
    invalid = [
        e for e in agent.store.events(kind="proposal") if e["payload"]["status"] == "invalid"
    ]
    if proposal is None:
        assert invalid  # every turn was a call that could not run
    agent.close()


def test_read_only_calls_are_auto_approved(tmp_path: Path, workspace: Path, policy: Any) -> None:
    agent = make_agent(tmp_path, workspace, policy, allowed_tools=["read", "write"], max_turns=3)
    _, proposal = agent.start_task("Read src/calc/ops.py, then fix mean()")
    auto = [e for e in agent.store.events(kind="decision") if e["payload"]["decision"] == "approve"]
    reads = [e for e in agent.store.events(kind="proposal") if e["payload"]["tool"] == "read"]
    assert len(auto) == len(reads)
    assert proposal is None or proposal.call.tool == "write"
    agent.close()


def test_deny_needs_a_correction_and_retries_differently(
    tmp_path: Path, workspace: Path, policy: Any
) -> None:
    agent = make_agent(tmp_path, workspace, policy, allowed_tools=["write", "edit_lines"])
    _, proposal = agent.start_task("Fix mean() in src/calc/ops.py")
    assert proposal is not None
    with pytest.raises(AgentError, match="needs a correction"):
        agent.decide(proposal.id, "deny", correction="  ")
    outcome = agent.decide(proposal.id, "deny", correction="Use edit_lines on line 7 only.")
    assert outcome.ok
    decision = agent.store.decision(proposal.id)
    assert decision is not None and decision["correction"] == "Use edit_lines on line 7 only."
    # A correction never ends the task silently (DESIGN §4): the reviewer sees a chosen
    # retry that differs from the denied call, or the denied call again with why no
    # candidate survived and the Edit offer.
    retry = outcome.next_proposal
    assert retry is not None and agent.store.task(retry.task_id)["status"] != "done"
    [chosen] = agent.store.events(kind="retry_chosen")
    if chosen["payload"]["winner"] is None:
        assert retry.call == proposal.call and retry.note and "Edit this call" in retry.note
    else:
        assert retry.call != proposal.call
        assert retry.call.model_dump() == chosen["payload"]["winner"]
    with pytest.raises(AgentError, match="already"):
        agent.decide(proposal.id, "approve")
    agent.close()


def test_edit_executes_the_edited_call_and_records_the_diff(
    tmp_path: Path, workspace: Path, policy: Any
) -> None:
    agent = make_agent(tmp_path, workspace, policy, allowed_tools=["write", "edit_lines"])
    _, proposal = agent.start_task("Fix mean() in src/calc/ops.py")
    assert proposal is not None
    with pytest.raises(AgentError, match="not a valid"):
        agent.decide(proposal.id, "edit", edited_arguments={"tool": "edit_lines", "path": "a"})
    assert agent.store.decision(proposal.id) is None  # a bad edit records nothing
    edited = {
        "tool": "edit_lines",
        "path": "src/calc/ops.py",
        "start": 7,
        "end": 7,
        "content": "    return sum(values) / len(values)",
    }
    outcome = agent.decide(proposal.id, "edit", edited_arguments=edited)
    assert outcome.result is not None and outcome.result.ok
    assert "sum(values) / len(values)" in (workspace / "src/calc/ops.py").read_text()
    decision = agent.store.decision(proposal.id)
    assert decision is not None and decision["decision"] == "edit"
    assert decision["diff"] and "+" in decision["diff"]
    agent.close()


def test_stale_proposal_is_refused(tmp_path: Path, workspace: Path, policy: Any) -> None:
    agent = make_agent(tmp_path, workspace, policy, allowed_tools=["write"])
    _, proposal = agent.start_task("Fix mean() in src/calc/ops.py")
    assert proposal is not None and proposal.preview is not None
    path = workspace / proposal.preview.path
    # Someone else writes the file first (if it did not exist, creating it is a change too).
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((path.read_text() if path.exists() else "") + "# changed by someone else\n")
    with pytest.raises(AgentError, match="stale"):
        agent.decide(proposal.id, "approve")
    assert "# changed by someone else" in path.read_text()
    agent.close()


def test_unknown_proposal_is_a_clear_error(tmp_path: Path, workspace: Path, policy: Any) -> None:
    agent = make_agent(tmp_path, workspace, policy)
    with pytest.raises(AgentError, match="unknown proposal"):
        agent.decide("prop-missing", "approve")
    with pytest.raises(AgentError, match="needs some text"):
        agent.start_task("   ")
    agent.close()


def test_sigkill_after_commit_is_finished_on_restart(tmp_path: Path, workspace: Path) -> None:
    """A process commits an approval and dies before writing; the next Agent applies it."""
    store_path = tmp_path / "store.sqlite3"
    script = textwrap.dedent(
        f"""
        import os, signal
        from continual_lsp.store import Store
        from continual_lsp.tools import ToolRunner
        from continual_lsp.tools.base import ToolCall
        from continual_lsp.config import Settings
        ws = ToolRunner({str(workspace)!r}, Settings())
        call = ToolCall(tool="write", arguments={{"path": "new.txt", "content": "hi\\n"}})
        preview = ws.preview(call)
        s = Store({str(store_path)!r})
        t = s.create_task("t", {str(workspace)!r})
        p = s.add_proposal(t, 0, "write", call.arguments, [1], [2], [-1.0], preview.model_dump(), None)
        s.record_decision(p, "approve")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert not (workspace / "new.txt").exists()
    store = Store(store_path)
    agent = Agent(Settings(enable_training=False), workspace, store=store)
    assert (workspace / "new.txt").read_text() == "hi\n"
    assert store.pending_decisions() == []
    assert len(store.events(kind="decision")) == 1
    agent.close()


@pytest.mark.parametrize("decision", ["approve", "edit"])
@pytest.mark.parametrize("tool", ["write", "edit"])
def test_recovery_never_overwrites_newer_work(
    tmp_path: Path, workspace: Path, decision: str, tool: str
) -> None:
    """Issue 15: a committed decision replayed on restart after the file changed."""
    from continual_lsp.tools import ToolCall, ToolRunner

    target = workspace / "notes.txt"
    target.write_text("one\ntwo\n")
    args = (
        {"path": "notes.txt", "content": "proposed\n"}
        if tool == "write"
        else {"path": "notes.txt", "old": "two", "new": "TWO"}
    )
    call = ToolCall(tool=tool, arguments=args)
    preview = ToolRunner(workspace, Settings()).preview(call)
    assert preview is not None
    store = Store(tmp_path / "store.sqlite3")
    task = store.create_task("t", str(workspace))
    pid = store.add_proposal(task, 0, tool, args, [1], [2], [-1.0], preview.model_dump(), None)
    if decision == "edit":
        edited = {"tool": tool, **args}
        edited["content" if tool == "write" else "new"] = "EDITED"
        store.record_decision(pid, "edit", edited_arguments=edited, diff="-x\n+y\n")
    else:
        store.record_decision(pid, "approve")
    # The server died after the commit; the reviewer kept working on the file.
    target.write_text("one\ntwo\nthree, typed after the crash\n")
    agent = Agent(Settings(enable_training=False), workspace, store=store)
    assert target.read_text() == "one\ntwo\nthree, typed after the crash\n"
    assert store.pending_decisions() == []
    result = store.events(proposal_id=pid)
    assert any("not applied" in str(e) for e in result)
    agent.close()


def test_a_denial_queues_the_calls_approved_after_its_cluster(
    tmp_path: Path, workspace: Path, policy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from continual_lsp.tools.base import ToolCall

    agent = make_agent(tmp_path, workspace, policy, allowed_tools=["bash"])
    jobs = record_jobs(agent, monkeypatch)
    correction = "This project uses pnpm, never npm."
    _, first = agent.start_task("Install the dependencies")
    assert first is not None
    agent.decide(first.id, "deny", correction=correction)
    # What the training jobs record when the reviewer approves the retry (training is off here).
    approved = ToolCall(tool="bash", arguments={"cmd": "pnpm install"})
    agent.store.enqueue_job(
        "sdpo",
        {
            "proposal_id": first.id,
            "signal": "approved_retry",
            "demonstration": approved.model_dump(),
        },
    )
    _, second = agent.start_task("Add lodash to the project")
    assert second is not None
    agent.decide(second.id, "deny", correction=correction)
    by_proposal = {job["proposal"]: job["examples"] for job in jobs}
    assert by_proposal[first.id] == []
    assert by_proposal[second.id] == [approved]
    # Both carry the cluster they were routed to: what `replay_same_cluster` replays from.
    clusters = {job["cluster"] for job in jobs}
    assert len(clusters) == 1 and None not in clusters
    agent.close()


def test_a_denial_is_queued_for_training_even_when_routing_fails(
    tmp_path: Path, workspace: Path, policy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(tmp_path, workspace, policy, allowed_tools=["write"])
    jobs = record_jobs(agent, monkeypatch)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the embedding model is missing")

    monkeypatch.setattr(agent.lanes, "route_correction", broken)
    _, proposal = agent.start_task("Create notes.txt that says hello")
    assert proposal is not None
    with pytest.raises(RuntimeError, match="embedding model"):
        agent.decide(proposal.id, "deny", correction="Say hi, not hello.")
    # The step was queued with the denial and released, without a demonstration, when
    # the error surfaced.
    assert [(j["proposal"], j["held"], j["demo"]) for j in jobs] == [(proposal.id, False, None)]
    decision = agent.store.decision(proposal.id)
    assert decision is not None and decision["correction"] == "Say hi, not hello."
    agent.close()


class _IdleWorker:
    """Stands in for the training worker process: these tests look at the queue only."""

    alive = ready = True

    def start(self) -> None:
        pass

    def notify(self) -> None:
        pass

    def stop(self) -> None:
        pass


@pytest.fixture
def idle_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    from continual_lsp.learning import team_worker, worker

    assert team_worker.TeamSeat  # built on the real class before it is patched
    monkeypatch.setattr(worker, "TrainingWorker", lambda *args: _IdleWorker())


def _training_agent(tmp_path: Path, workspace: Path, policy: Any = None, **overrides: Any) -> Agent:
    settings = Settings(store_path=str(tmp_path / "store.sqlite3"), **overrides)
    return Agent(settings, workspace, policy=policy)


def test_a_denials_step_is_committed_before_its_retry_is_chosen(
    tmp_path: Path,
    workspace: Path,
    policy: Any,
    idle_worker: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = _training_agent(tmp_path, workspace, policy, allowed_tools=["write"])
    _, proposal = agent.start_task("Create notes.txt that says hello")
    assert proposal is not None
    held: list[int] = []

    def crash(parts: Any, task: Any, denied: Any, correction: str) -> None:
        held.extend(agent.store.held_jobs())
        raise RuntimeError("the sampler died mid-choice")

    monkeypatch.setattr(retry, "choose_retry", crash)
    with pytest.raises(RuntimeError, match="mid-choice"):
        agent.decide(proposal.id, "deny", correction="Say hi, not hello.")
    [job_id] = held  # queued with the denial, held while the retry was being chosen
    job = agent.store.job(job_id)
    assert job is not None and job["status"] == "pending"  # released: the step still runs
    assert job["payload"]["proposal_id"] == proposal.id
    assert job["payload"]["correction"] == "Say hi, not hello."
    assert job["payload"]["demonstration"] is None
    agent.close()


def test_a_job_held_by_a_crash_mid_choice_runs_after_restart(
    tmp_path: Path, workspace: Path, idle_worker: None
) -> None:
    store = Store(tmp_path / "store.sqlite3")
    task_id = store.create_task("t", str(workspace))
    pid = store.add_proposal(
        task_id, 0, "write", {"path": "a", "content": "b"}, [1], [2], [-0.5], None, None
    )
    store.record_decision(pid, "deny", correction="not a")
    job_id = store.enqueue_job("sdpo", {"proposal_id": pid, "correction": "not a"}, held=True)
    store.close()  # the server died while choosing the retry
    agent = _training_agent(tmp_path, workspace)
    job = agent.store.job(job_id)
    assert job is not None and job["status"] == "pending"
    assert agent.store.queue_depth(("sdpo",)) == 1  # released, not queued a second time
    assert agent.store.pending_decisions() == []
    agent.close()


def test_a_task_starts_with_its_files_in_view(tmp_path: Path, workspace: Path, policy: Any) -> None:
    agent = make_agent(tmp_path, workspace, policy, allowed_tools=["edit_lines"], max_turns=2)
    source = (workspace / "src/calc/ops.py").read_text()
    task_id, _ = agent.start_task("Fix mean().", [str(workspace / "src/calc/ops.py")])
    in_view = [e["payload"] for e in agent.store.events(kind="in_view")]
    assert in_view == [{"path": "src/calc/ops.py"}]  # absolute in, workspace-relative shown
    first = agent.store.events(kind="proposal")[0]
    prompt = agent.policy.tokenizer.decode(
        agent.store.proposal(first["proposal_id"])["prompt_tokens"]
    )
    # The model's first turn already holds the file, line-numbered as `read` shows it.
    assert "def mean(values):" in source and "\tdef mean(values):" in prompt
    assert first["task_id"] == task_id
    # Read, as far as the checks go: a write of the whole file in view may run (it was
    # refused as "has not read", so the correction "send all of it with write" could
    # never be followed from a file's editor).
    assert seen_paths(agent.tools, agent._parts.tasks[task_id]) == {"src/calc/ops.py"}
    agent.close()


@pytest.mark.parametrize("path", ["../outside.py", "src/calc/missing.py"])
def test_a_file_that_cannot_be_read_fails_the_start_before_a_task_exists(
    tmp_path: Path, workspace: Path, policy: Any, path: str
) -> None:
    agent = make_agent(tmp_path, workspace, policy)
    with pytest.raises(AgentError, match=f"cannot start with {path} in view"):
        agent.start_task("Fix mean().", [path])
    assert agent.store.events(kind="task") == []
    agent.close()


def test_reading_again_after_a_call_that_could_not_run_is_not_the_end(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    from tests.server.scripted import FIX_MEAN, ForcedCallPolicy

    read = {"tool": "read", "arguments": {"path": "src/calc/ops.py"}}
    wrong = {"tool": "edit", "arguments": {"path": "src/calc/ops.py", "old": "nope", "new": "x"}}
    settings = Settings(enable_training=False, store_path=str(tmp_path / "store.sqlite3"))
    # The failed edit's replacement samples (one batch) are reads again: not runnable anew.
    script = ForcedCallPolicy(settings, [read, wrong, read, read, FIX_MEAN], model_and_tokenizer)
    agent = Agent(settings, workspace, policy=script)
    _, proposal = agent.start_task("Fix mean() in src/calc/ops.py")
    # The edit could not run (its old text is not in the file); the read after it ran
    # again instead of ending the task, and the fix that followed is shown.
    statuses = [
        (e["payload"]["tool"], e["payload"]["status"]) for e in agent.store.events(kind="proposal")
    ]
    assert statuses[:3] == [("read", "pending"), ("edit", "invalid"), ("read", "pending")]
    assert proposal is not None and proposal.call.tool == "edit_lines"
    assert agent.store.events(kind="repeat_of_executed") == []
    agent.close()


def test_a_call_that_cannot_run_gives_way_to_a_runnable_sample(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    """The model's call cannot run (a range past the end): the likeliest runnable sample
    from the same prompt is shown instead, and the failure stays out of the conversation."""
    from tests.server.scripted import FIX_MEAN, ForcedCallPolicy

    past_end = {
        "tool": "edit_lines",
        "arguments": {"path": "src/calc/ops.py", "start": 90, "end": 90, "content": "x"},
    }
    settings = Settings(enable_training=False, store_path=str(tmp_path / "store.sqlite3"))
    script = ForcedCallPolicy(settings, [past_end, FIX_MEAN], model_and_tokenizer)
    agent = Agent(settings, workspace, policy=script)
    _, proposal = agent.start_task("Fix mean() in src/calc/ops.py")
    assert proposal is not None and proposal.call.arguments == FIX_MEAN["arguments"]
    statuses = [e["payload"]["status"] for e in agent.store.events(kind="proposal")]
    assert statuses == ["invalid", "pending"]
    (replaced,) = [e["payload"] for e in agent.store.events(kind="invalid_replaced")]
    assert "past the end" in replaced["error"] and replaced["winner"]["tool"] == "edit_lines"
    row = agent.store.proposal(proposal.id)
    assert row is not None and "past the end" not in script.renderer.decode(row["prompt_tokens"])
    agent.close()


def test_a_runnable_sample_a_guard_rewrote_is_shown_not_run_unasked(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    """In place of a call that cannot run, the sample is `npm test`; the project's guard
    rewrites it to `pnpm test`, which an allow rule covers. A rewrite is the reviewer's to
    see, as for any sampled call: it is shown with the guard's note, not run."""
    from tests.server.scripted import ForcedCallPolicy

    past_end = {
        "tool": "edit_lines",
        "arguments": {"path": "src/calc/ops.py", "start": 90, "end": 90, "content": "x"},
    }
    npm = {"tool": "bash", "arguments": {"cmd": "npm test"}}
    settings = Settings(enable_training=False, store_path=str(tmp_path / "store.sqlite3"))
    script = ForcedCallPolicy(settings, [past_end, npm], model_and_tokenizer)
    agent = Agent(settings, workspace, policy=script)
    agent.note("This project uses pnpm, not npm: run `pnpm test`.")
    pnpm = ToolCall(tool="bash", arguments={"cmd": "pnpm test"})
    agent.lanes.add_allow_rule(pnpm, None, str(workspace), "test", learned=False)
    _, proposal = agent.start_task("Fix mean() in src/calc/ops.py")
    assert proposal is not None and proposal.call == pnpm
    assert proposal.note is not None and proposal.note.startswith("rewritten by a guard")
    assert agent.store.events(kind="auto_approved") == []
    agent.close()


def test_a_task_that_only_looked_is_not_ended_by_its_first_repeat(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    """The model asks for the file it already read, three times: the third try may only
    act (the grammar drops read, glob and grep), so the reviewer is shown a change."""
    from tests.server.scripted import FIX_MEAN, ForcedCallPolicy

    read = {"tool": "read", "arguments": {"path": "src/calc/ops.py"}}
    settings = Settings(enable_training=False, store_path=str(tmp_path / "store.sqlite3"))
    script = ForcedCallPolicy(settings, [read, read, read, FIX_MEAN], model_and_tokenizer)
    offered: list[list[str] | None] = []
    scripted = script.sample

    def sample(prompt_tokens: list[int], params: Any) -> Any:
        offered.append(params.tools)
        return scripted(prompt_tokens, params)

    script.sample = sample  # type: ignore[method-assign]
    agent = Agent(settings, workspace, policy=script)
    _, proposal = agent.start_task("Fix mean() in src/calc/ops.py")
    assert proposal is not None and proposal.call.tool == "edit_lines"
    assert offered[:3] == [None, None, None]
    assert offered[3] is not None and not {"read", "glob", "grep"} & set(offered[3])
    assert "edit_lines" in offered[3]
    agent.close()


def test_a_path_to_read_or_edit_names_a_file_of_the_workspace(
    tmp_path: Path, workspace: Path, policy: Any
) -> None:
    """The task names a file that is not there: the model, which copies the path it was
    given, reads one that is (Settings.decode_paths_limit); off, it reads the missing one."""
    reads: dict[int, list[str]] = {}
    for limit in (2000, 0):
        (tmp_path / f"limit{limit}").mkdir()
        agent = make_agent(
            tmp_path / f"limit{limit}",
            workspace,
            policy,
            allowed_tools=["read", "write"],
            max_turns=2,
            decode_paths_limit=limit,
        )
        agent.start_task("Read lib/calc/ops.py and fix mean()")
        events = agent.store.events(kind="proposal")
        reads[limit] = [
            e["payload"]["arguments"]["path"] for e in events if e["payload"]["tool"] == "read"
        ]
        agent.close()
    assert reads[2000] and all((workspace / p).is_file() for p in reads[2000])
    assert "lib/calc/ops.py" in reads[0]


def test_running_the_tests_again_after_a_change_is_no_repeat(
    tmp_path: Path, workspace: Path, model_and_tokenizer: Any
) -> None:
    """Run, fix, run again (issue 30): the second run checks the change, so it is shown
    as it is, not re-sampled as a repeat; the same run twice with no change between is."""
    from tests.server.scripted import FIX_MEAN, RUN_TESTS, ForcedCallPolicy

    settings = Settings(enable_training=False, store_path=str(tmp_path / "store.sqlite3"))
    script = ForcedCallPolicy(settings, [RUN_TESTS, FIX_MEAN, RUN_TESTS], model_and_tokenizer)
    agent = Agent(settings, workspace, policy=script)
    _, run = agent.start_task("Fix mean() in src/calc/ops.py")
    assert run is not None and run.call.model_dump() == RUN_TESTS
    fix = agent.decide(run.id, "approve").next_proposal
    assert fix is not None and fix.call.model_dump() == FIX_MEAN
    rerun = agent.decide(fix.id, "approve").next_proposal
    assert rerun is not None and rerun.call.model_dump() == RUN_TESTS
    assert agent.store.events(kind="repeat_of_executed") == []
    agent.close()
