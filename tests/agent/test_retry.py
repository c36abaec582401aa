"""The retry after a correction is chosen, not just sampled (DESIGN §4), on the real model.

Training is off (tests/learning covers the step); what is checked is the choice: N
candidates in one batch, nothing a guard blocks or the reviewer denied is shown, the
winner is the step's demonstration, and a correction never ends a task silently.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest

from continual_lsp.agent.agent import Agent
from continual_lsp.agent.errors import AgentError
from continual_lsp.config import Settings
from continual_lsp.protocol import LearnedNotification
from continual_lsp.tools.base import ToolCall
from tests.agent.support import make_agent, record_jobs

pytestmark = pytest.mark.model


def _block(agent: Agent, call: ToolCall) -> None:
    """A guard that blocks exactly `call`'s command (not a grammar-expressible shape, so
    the model keeps sampling it and the guard has to catch it)."""
    agent.store.add_lane_item(
        {
            "text": "not that command",
            "lane": "CODE",
            "reason": "test",
            "spec": {
                "message": "Do not run that command.",
                "rules": [{"kind": "command", "pattern": "^" + re.escape(call.arguments["cmd"])}],
            },
        }
    )


def test_a_guard_on_the_favourite_call_still_shows_the_reviewer_something(
    tmp_path: Path, workspace: Path, policy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(tmp_path, workspace, policy, allowed_tools=["bash"])
    task = "Install the project's dependencies"
    _, favourite = agent.start_task(task)
    assert favourite is not None and favourite.call.tool == "bash"
    _block(agent, favourite.call)
    jobs = record_jobs(agent, monkeypatch)
    task_id, shown = agent.start_task(task)
    # The favourite was sampled again and blocked (an automatic denial) ...
    blocked = [e for e in agent.store.events(kind="decision") if e["payload"]["decision"] == "deny"]
    assert len(blocked) == 1
    # ... and the reviewer is shown a compliant call, or the blocked one with a reason.
    assert shown is not None, "a guard block ended the task silently"
    [chosen] = agent.store.events(kind="retry_chosen")
    assert chosen["payload"]["candidates"] == agent.settings.retry_candidates
    assert agent.store.task(task_id)["status"] != "done"
    if chosen["payload"]["winner"] is None:
        assert shown.note and shown.note.startswith("No compliant retry among 6 candidates")
        assert "override the guard" in shown.note and shown.blocked_by == "Do not run that command."
        with pytest.raises(AgentError, match=r"a guard blocks this call.*override"):
            agent.decide(shown.id, "approve")
    else:
        assert shown.call != favourite.call
        assert agent.lanes.check_guards(shown.call, shown.preview).action != "block"
        # The winner is the blocked turn's demonstration.
        assert [(j["proposal"], j["signal"], j["demo"]) for j in jobs] == [
            (blocked[0]["proposal_id"], "deny", shown.call)
        ]
    agent.close()


def test_a_denial_shows_the_chosen_retry_and_teaches_it(
    tmp_path: Path, workspace: Path, policy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(tmp_path, workspace, policy, allowed_tools=["write", "edit_lines"])
    jobs = record_jobs(agent, monkeypatch)
    _, proposal = agent.start_task("Fix mean() in src/calc/ops.py")
    assert proposal is not None
    outcome = agent.decide(proposal.id, "deny", correction="Use edit_lines on line 7 only.")
    retry = outcome.next_proposal
    assert retry is not None and outcome.task_done is None
    [chosen] = agent.store.events(kind="retry_chosen")
    payload = chosen["payload"]
    if payload["winner"] is not None:
        assert retry.call != proposal.call and retry.call.model_dump() == payload["winner"]
        assert [(j["proposal"], j["demo"], j["held"]) for j in jobs] == [
            (proposal.id, retry.call, False)
        ]
        assert retry.preview is not None  # its preview ran: it can be applied
    else:
        assert retry.call == proposal.call and retry.note and "Edit" in retry.note
        assert [(j["proposal"], j["demo"], j["held"]) for j in jobs] == [(proposal.id, None, False)]
    agent.close()


def test_only_repeats_of_the_denied_call_offer_edit_with_the_reason(
    tmp_path: Path, workspace: Path, model_and_tokenizer: tuple[Any, Any]
) -> None:
    from tests.server.scripted import WRONG_TEST, ForcedCallPolicy

    forced = ForcedCallPolicy(Settings(enable_training=False), [WRONG_TEST], model_and_tokenizer)
    agent = make_agent(tmp_path, workspace, forced)
    task_id, proposal = agent.start_task("Fix mean() in src/calc/ops.py")
    assert proposal is not None
    outcome = agent.decide(proposal.id, "deny", correction="Fix the code, not the test.")
    offer = outcome.next_proposal
    assert offer is not None and offer.call == proposal.call and offer.id != proposal.id
    assert offer.note == (
        "No compliant retry among 6 candidates: 6 repeated the denied call. "
        "Edit this call to show what you want, or deny it again."
    )
    assert agent.store.task(task_id)["status"] != "done"
    # The reviewer edits it: the edit is the demonstration, the task goes on.
    fixed = {
        "tool": "edit_lines",
        "path": "src/calc/ops.py",
        "start": 7,
        "end": 7,
        "content": "    return sum(values) / len(values)\n",
    }
    edited = agent.decide(offer.id, "edit", edited_arguments=fixed)
    assert edited.ok and edited.result is not None and edited.result.ok
    agent.close()


@pytest.mark.parametrize(
    ("written", "variants"),
    [
        # The model copies line 7 with a comment: the swap applies to what it wrote and to
        # line 7 as the file has it; the one in place is exactly what the correction says.
        ("    return sum(values) // len(values)  # the mean", 2),
        # The model picks line 7 but writes nonsense there: only the swap in place is left.
        ("    return 5*abs(values)", 1),
    ],
)
def test_a_literal_swap_in_the_correction_is_applied_in_place(
    tmp_path: Path,
    workspace: Path,
    model_and_tokenizer: tuple[Any, Any],
    monkeypatch: Any,
    written: str,
    variants: int,
) -> None:
    """The model can only repeat its call (scripted); the correction names the swap, so the
    retry is line 7 with `//` made `/` — shown, and the step's demonstration."""
    from tests.server.scripted import ForcedCallPolicy

    floor = {
        "tool": "edit_lines",
        "arguments": {"path": "src/calc/ops.py", "start": 7, "end": 7, "content": written},
    }
    forced = ForcedCallPolicy(Settings(enable_training=False), [floor], model_and_tokenizer)
    agent = make_agent(tmp_path, workspace, forced)
    jobs = record_jobs(agent, monkeypatch)
    _, proposal = agent.start_task("Fix mean() in src/calc/ops.py")
    assert proposal is not None
    outcome = agent.decide(proposal.id, "deny", correction="Use / instead of //.")
    retry = outcome.next_proposal
    assert retry is not None and retry.note is None
    assert retry.call.arguments["content"] == "    return sum(values) / len(values)"
    (chosen,) = [e["payload"] for e in agent.store.events(kind="retry_chosen")]
    assert chosen["substituted"] == variants and chosen["winner"] == retry.call.model_dump()
    assert [j["demo"] for j in jobs] == [retry.call]
    agent.close()


def _probed(model_and_tokenizer: tuple[Any, Any], answer: Any) -> Any:
    """The real model scripted to FIX_MEAN whatever is asked, except that a batch for
    which `answer(params)` gives a call is that call (a retry's probe)."""
    from tests.server.scripted import FIX_MEAN, ForcedCallPolicy

    class Probed(ForcedCallPolicy):
        def sample_batch(self, prompt_tokens: list[int], params: Any, n: int) -> Any:
            call = answer(params)
            if call is None:
                return super().sample_batch(prompt_tokens, params, n)
            self.calls, kept = [call], self.calls
            try:
                return super().sample_batch(prompt_tokens, params, n)
            finally:
                self.calls = kept

    return Probed(Settings(enable_training=False), [FIX_MEAN], model_and_tokenizer)


def test_a_tool_the_correction_names_is_sampled_when_no_candidate_used_it(
    tmp_path: Path, workspace: Path, model_and_tokenizer: tuple[Any, Any]
) -> None:
    """The model only repeats its edit_lines (scripted, as the 135M model did after "use
    write": six samples of the denied tool); the correction names write, so one greedy
    write is sampled too, and it is the retry."""
    fixed = (workspace / "src/calc/ops.py").read_text().replace("//", "/")
    whole = {"tool": "write", "arguments": {"path": "src/calc/ops.py", "content": fixed}}

    # a batch of write only: the whole file
    forced = _probed(model_and_tokenizer, lambda p: whole if p.tools == ["write"] else None)
    agent = make_agent(tmp_path, workspace, forced)
    _, proposal = agent.start_task("Fix mean().", ["src/calc/ops.py"])
    assert proposal is not None and proposal.call.tool == "edit_lines"
    outcome = agent.decide(proposal.id, "deny", correction="Send the whole file with write.")
    retry = outcome.next_proposal
    assert retry is not None and retry.call.model_dump() == whole
    (chosen,) = [e["payload"] for e in agent.store.events(kind="retry_chosen")]
    assert chosen["probes"] == 1 and chosen["dropped"] == {"repeated the denied call": 6}
    agent.close()


@pytest.mark.parametrize(
    ("named", "allowed"),
    [("./src/calc/double.py", "src/calc/double.py"), ("src/calc/", "src/calc/")],
    ids=["file", "folder"],
)
def test_a_new_file_where_the_correction_says_is_written_when_no_candidate_wrote_it(
    tmp_path: Path,
    workspace: Path,
    model_and_tokenizer: tuple[Any, Any],
    named: str,
    allowed: str,
) -> None:
    """Every sample edits the file in view (scripted, as the 135M model did when told
    where a new module goes); the correction names a file that does not exist yet, or
    a folder, so one greedy write is decoded under a grammar that names only it (or a
    file in it), and it is the retry."""
    target = "src/calc/double.py"
    helper = {
        "tool": "write",
        "arguments": {"path": target, "content": "def double(x):\n    return 2 * x\n"},
    }

    def where_told(params: Any) -> dict[str, Any] | None:
        """The helper for a batch whose write may only name `allowed`."""
        if params.forbid is None or params.forbid.write_paths != [allowed]:
            return None
        assert params.tools == ["write"] and params.greedy_rows == 1
        return helper

    forced = _probed(model_and_tokenizer, where_told)
    agent = make_agent(tmp_path, workspace, forced)
    _, proposal = agent.start_task("Add a helper that doubles a number.", ["src/calc/ops.py"])
    assert proposal is not None and proposal.call.tool == "edit_lines"
    correction = f"Leave ops.py alone; the helper is a new module, in {named}."
    retry = agent.decide(proposal.id, "deny", correction=correction).next_proposal
    assert retry is not None and retry.call.model_dump() == helper
    (chosen,) = [e["payload"] for e in agent.store.events(kind="retry_chosen")]
    assert chosen["probes"] == 1
    agent.close()


def test_the_retry_is_shown_before_its_step_lands_and_the_next_turn_waits_for_it(
    tmp_path: Path, workspace: Path, policy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(tmp_path, workspace, policy, allowed_tools=["write", "edit_lines"])
    record_jobs(agent, monkeypatch)
    landed = threading.Event()

    def step(job_id: int, proposal_id: str, listener: Any, policy: Any) -> LearnedNotification:
        assert policy is None, "the waiting thread must not touch the sampler"
        assert landed.wait(60)
        return LearnedNotification(
            proposal_id=proposal_id, step=1, loss=0.1, adapter_version=None, seconds=0.5
        )

    monkeypatch.setattr(agent.training, "wait", step)
    events: list[str] = []
    agent.listener.on_learned = lambda note: events.append(f"learned {note.proposal_id}")  # type: ignore[method-assign]
    agent.listener.on_proposal = lambda p: events.append("proposal")  # type: ignore[method-assign]
    _, proposal = agent.start_task("Fix mean() in src/calc/ops.py")
    assert proposal is not None
    outcome = agent.decide(proposal.id, "deny", correction="Use edit_lines on line 7 only.")
    # The retry is there while the step still runs; the step is announced when it lands.
    assert outcome.next_proposal is not None and outcome.learned is None
    assert events == ["proposal", "proposal"]
    # The student's next turn is sampled only once the step has landed.
    turn = threading.Thread(target=agent.start_task, args=("Add median() to src/calc/ops.py",))
    turn.start()
    turn.join(2)
    assert turn.is_alive() and events == ["proposal", "proposal"]
    landed.set()
    turn.join(120)
    assert not turn.is_alive()
    assert events[2] == f"learned {proposal.id}"
    agent.close()
