"""Screening sampled calls before one is shown (`agent/candidates.py`), on plain data."""

from __future__ import annotations

import json

from continual_lsp.agent.candidates import Candidate, Screen, canonical, mean_logprob
from continual_lsp.lanes.guards import GuardVerdict
from continual_lsp.policy.base import Completion
from continual_lsp.tools.base import Preview, ToolCall, ToolError


def call(tool: str, **arguments: object) -> ToolCall:
    return ToolCall(tool=tool, arguments=arguments)


def sampled(c: ToolCall, logprob: float = -0.1) -> Completion:
    text = json.dumps({"tool": c.tool, "arguments": c.arguments})
    return Completion(tokens=[1, 2], logprobs=[logprob, logprob], text=text)


def parse(text: str) -> ToolCall:
    data = json.loads(text)  # a JSONDecodeError is a ValueError: "not a valid call"
    return ToolCall(tool=data["tool"], arguments=data["arguments"])


def preview(c: ToolCall) -> tuple[Preview | None, ToolError | None]:
    if c.arguments.get("path") == "missing.py":
        return None, ToolError("no such file")
    return None, None


def guards(c: ToolCall, _: Preview | None) -> GuardVerdict:
    cmd = str(c.arguments.get("cmd", ""))
    if cmd.startswith("rm "):
        return GuardVerdict(action="block", message="never rm")
    if cmd.startswith("npm "):
        rewritten = call("bash", cmd="pnpm " + cmd.removeprefix("npm "))
        return GuardVerdict(action="rewrite", message="pnpm", rewritten_call=rewritten)
    return GuardVerdict(action="allow", message="")


def test_each_candidate_is_kept_once_or_dropped_with_its_reason() -> None:
    denied = call("bash", cmd="make")
    ran = call("read", path="a.py")
    screen = Screen(parse, preview, guards, {canonical(denied)}, {canonical(ran)})
    fix = call("edit_lines", path="a.py", start=1, end=1, content="x")
    completions = [
        sampled(fix),
        sampled(fix),  # sampled twice: one candidate
        sampled(call("bash", cmd="npm test")),  # rewritten by the guard, then kept
        sampled(call("bash", cmd="rm -rf build")),
        sampled(denied),
        sampled(ran),
        sampled(call("edit_lines", path="missing.py", start=1, end=1, content="x")),
        Completion(tokens=[1], logprobs=[-1.0], text="not json"),
    ]
    kept, drops = screen.all(completions, [9, 9])
    assert [c.call for c in kept] == [fix, call("bash", cmd="pnpm test")]
    assert kept[1].note == "rewritten by a guard: pnpm"
    assert [c.verdict.action for c in kept if c.verdict] == ["allow", "rewrite"]
    assert kept[0].prompt_tokens == [9, 9]
    assert drops == {
        "were blocked by a guard (never rm)": 1,
        "repeated the denied call": 1,
        "repeated a call already run": 1,
        "could not run (no such file)": 1,
        "were not a valid call": 1,
    }


def test_mean_logprob_is_per_token() -> None:
    candidate = Candidate(call("read", path="a.py"), sampled(call("read", path="a.py"), -0.5), [])
    assert mean_logprob(candidate) == -0.5
