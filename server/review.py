"""`continual-lsp review`: one task, headless, for CI bots.

    continual-lsp review --task TEXT --workspace DIR --decisions FILE|- [--out FILE]

Drives the same Agent as the editor path, so decisions here learn exactly as they do
in an editor. Output is JSON lines (stdout, or --out), one object per event:

    {"type": "task", "taskId": …}
    {"type": "proposal", "proposalId": …, "tool": …, "arguments": …, "diff": …, …}
    {"type": "outcome", "proposalId": …, "decision": …, "ok": …, "result": …, "learned": …}
    {"type": "learned" | "routed", …}            (as the agent reports them)
    {"type": "taskDone", "taskId": …, "summary": …}
    {"type": "stopped", "reason": …, "pendingProposalId": …}   (decisions ran out)

Decisions are JSON lines read in order, one per proposal (blank lines and lines starting
with `#` are skipped); an optional "proposalId" must match the proposal it answers:

    {"decision": "approve"}
    {"decision": "deny", "correction": "use edit_lines, not write"}
    {"decision": "edit", "editedArguments": {"path": "a.py", "start": 3, "end": 3, "content": "x\\n"}}
    {"decision": "edit", "hunks": [{"index": 0, "accept": true}, {"index": 1, "accept": false, "reason": "keep it"}]}
    {"decision": "override"}     (only for a proposal line with "blockedBy": a guard blocks it)

A proposal with "tool": "done" is the agent saying the task is finished, in its own
words (`arguments.summary`): approving it ends the task (a `taskDone` line with that
summary); denying it ("not done: the test still fails") is a correction like any other.
A proposal a guard blocks carries `blockedBy` (the guard's reason): approving it is
refused; "override" runs it and counts against the guard. A proposal line lists a
multi-hunk change's `hunks`; deciding them one by one makes a
partial accept an edit (the rejected hunks' reasons are its correction).

Reading decisions line by line lets a bot answer each proposal as it appears (a pipe).
Exit codes: 0 the run ended (task done, or decisions ran out: a `stopped` line says
which proposal is pending); 1 the agent failed; 2 bad input (workspace, decisions).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from continual_lsp.agent.errors import AgentError
from continual_lsp.config import Settings
from continual_lsp.protocol import (
    HunkDecision,
    LearnedNotification,
    RoutedNotification,
    TaskDoneNotification,
)

from .agents import AgentFactory, default_agent_factory
from .lsp_text import describe_call
from .proposals import notification

if TYPE_CHECKING:
    from continual_lsp.agent.agent import Agent
    from continual_lsp.agent.proposal import Proposal

OUTPUT_CLIP = 4000


class ReviewDecision(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    decision: Literal["approve", "deny", "edit", "override"]
    correction: str | None = Field(default=None, max_length=10_000)
    edited_arguments: dict[str, Any] | None = Field(default=None, alias="editedArguments")
    proposal_id: str | None = Field(default=None, alias="proposalId")
    hunks: list[HunkDecision] | None = Field(default=None, min_length=1)


class ReviewInputError(Exception):
    """Bad input from the bot; the message names the line and the problem."""


class _Out:
    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def emit(self, kind: str, payload: dict[str, Any]) -> None:
        self.stream.write(json.dumps({"type": kind, **payload}) + "\n")
        self.stream.flush()  # a bot reading the pipe answers each proposal as it comes


class _Listener:
    """Agent events that have no return value to carry them (learning, routing, end)."""

    def __init__(self, out: _Out) -> None:
        self.out = out

    def on_proposal(self, proposal: Proposal) -> None:
        pass  # written from decide's return value, so it follows its outcome line

    def on_learned(self, note: LearnedNotification) -> None:
        self.out.emit("learned", note.dump())

    def on_routed(self, note: RoutedNotification) -> None:
        self.out.emit("routed", note.dump())

    def on_task_done(self, note: TaskDoneNotification) -> None:
        self.out.emit("taskDone", note.dump())

    def on_progress(
        self, token: str, title: str, message: str, percentage: int | None, done: bool
    ) -> None:
        if done or percentage in (None, 0):
            print(f"continual-lsp review: {title}: {message}", file=sys.stderr)


def read_decisions(stream: IO[str]) -> Iterator[tuple[int, ReviewDecision]]:
    for number, line in enumerate(stream, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ReviewInputError(f"decisions line {number}: not JSON ({exc})") from exc
        try:
            yield number, ReviewDecision.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'line'}: {e['msg']}" for e in exc.errors()
            )
            raise ReviewInputError(f"decisions line {number}: {problems}") from exc


def _proposal_line(agent: Agent, proposal: Proposal) -> dict[str, Any]:
    payload = notification(proposal, agent.workspace).dump()
    payload["description"] = describe_call(proposal.call.tool, proposal.call.arguments)
    return payload


def _drive(agent: Agent, task: str, files: Sequence[str], decisions: IO[str], out: _Out) -> int:
    task_id, proposal = agent.start_task(task, files)
    out.emit("task", {"taskId": task_id})
    stream = read_decisions(decisions)
    while proposal is not None:
        out.emit("proposal", _proposal_line(agent, proposal))
        try:
            number, decision = next(stream)
        except StopIteration:
            out.emit("stopped", {"reason": "no more decisions", "pendingProposalId": proposal.id})
            print(
                f"continual-lsp review: decisions ran out; proposal {proposal.id} is pending",
                file=sys.stderr,
            )
            return 0
        if decision.proposal_id not in (None, proposal.id):
            raise ReviewInputError(
                f"decisions line {number}: answers {decision.proposal_id}, "
                f"but the pending proposal is {proposal.id}"
            )
        try:
            outcome = agent.decide(
                proposal.id,
                decision.decision,
                decision.correction,
                decision.edited_arguments,
                hunks=decision.hunks,
            )
        except AgentError as exc:
            raise ReviewInputError(f"decisions line {number}: {exc}") from exc
        result = None
        if outcome.result is not None:
            result = outcome.result.model_dump()
            result["output"] = result["output"][:OUTPUT_CLIP]
        out.emit(
            "outcome",
            {
                "proposalId": proposal.id,
                "decision": decision.decision,
                "ok": outcome.ok,
                "result": result,
                "learned": outcome.learned.dump() if outcome.learned else None,
            },
        )
        proposal = outcome.next_proposal
    return 0


def run_review(
    settings: Settings,
    task: str,
    workspace: str | Path,
    decisions_file: str | Path,
    out: str | Path | None = None,
    *,
    files: Sequence[str] = (),
    agent_factory: AgentFactory | None = None,
) -> int:
    """Run one task headless, with `files` in view; returns the exit code (messages go to
    stderr)."""
    root = Path(workspace)
    if not root.is_dir():
        print(f"continual-lsp review: workspace {root} is not a directory", file=sys.stderr)
        return 2
    if not task.strip():
        print("continual-lsp review: --task needs some text", file=sys.stderr)
        return 2
    try:
        decisions = (
            sys.stdin if str(decisions_file) == "-" else open(decisions_file, encoding="utf-8")  # noqa: SIM115 (closed below)
        )
    except OSError as exc:
        print(f"continual-lsp review: cannot read decisions: {exc}", file=sys.stderr)
        return 2
    to_stdout = out is None or str(out) == "-"
    if to_stdout:
        # fd 1 carries the JSON lines only: whatever else prints goes to stderr.
        sys.stdout.flush()
        stream: IO[str] = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    else:
        try:
            stream = open(out, "w", encoding="utf-8")  # noqa: SIM115 (closed below)
        except OSError as exc:
            print(f"continual-lsp review: cannot write {out}: {exc}", file=sys.stderr)
            return 2
    writer = _Out(stream)
    agent = None
    try:
        factory = agent_factory or default_agent_factory
        agent = factory(settings, root.resolve(), _Listener(writer))
        return _drive(agent, task, files, decisions, writer)
    except ReviewInputError as exc:
        print(f"continual-lsp review: {exc}", file=sys.stderr)
        return 2
    except AgentError as exc:
        print(f"continual-lsp review: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug, but CI still gets one clear line and a failure
        print(f"continual-lsp review: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if agent is not None:
            # A denial's step lands after its retry was shown: let it, so the run learns
            # what it was told (and prints its `learned` line) before the worker stops.
            agent.await_steps()
            agent.close()
        if decisions is not sys.stdin:
            decisions.close()
        stream.flush()
        if not to_stdout:
            stream.close()
