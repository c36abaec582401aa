"""Scenario files: a lesson as data, and the check that says whether it took.

A scenario teaches one rule: training situations (a task on a workspace, the calls
already made, the reviewer's correction, the call the reviewer accepts and a call that
breaks the rule) and held-out situations (other files, names and tasks), with a
declarative `check` on a proposed call. `bench/learning` runs its scenarios from these
files; `continual-lsp check FILE` runs a file's held-out situations against the current
adapter and prints compliance, a user's proof that a lesson took.

Format (JSON or TOML; every field is validated, and an error names the field):

    name, title, rule, tools (the grammar's tools at this decision), max_tokens,
    check: {tool_in, tool_not_in, argument_matches, argument_not_matches,
            path_under, path_not_under, doc}   (all given conditions must hold)
    about: a check of the same shape, optional: the calls a reviewer judges by this
            rule (default: a call with one of `tools`); "commit messages" are about
            `git commit`, not every bash call
    off_task: a check of the same shape, optional: calls that leave the task before the
            call the rule is about has come (an edit to the code when the task is to
            commit it, a `done` before the tests are written); a scripted reviewer
            denies them with the situation's correction
    train / held_out: [{id, workspace (a directory, relative to the file), task,
            history: [{tool, arguments, output?}], correction, demonstration,
            violation, names}]

`argument_matches` maps an argument name to a regex searched in its value; "a|b" names
the first of several arguments present (written text: `content` or `new`). A history
call without `output` is run, read-only, on the workspace to get the tool's real output.
A proposal cut at the decode budget is judged on the fields it wrote (`judge_text`).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from continual_lsp.agent.conversation import Conversation
from continual_lsp.config import Settings
from continual_lsp.policy.base import Message, SampleParams, Sampler
from continual_lsp.tools.base import TOOL_NAMES, ToolCall, ToolResult
from continual_lsp.tools.runner import ToolRunner


class ScenarioFileError(ValueError):
    """A scenario file that cannot be used; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _known_tools(tools: list[str] | None) -> list[str] | None:
    unknown = sorted(set(tools or []) - set(TOOL_NAMES))
    if unknown:
        raise ValueError(f"unknown tools {unknown}; the tools are {', '.join(TOOL_NAMES)}")
    return tools


class Check(_Strict):
    """Whether a proposed call keeps the rule: every condition given must hold."""

    doc: str = ""
    tool_in: list[str] | None = None
    tool_not_in: list[str] | None = None
    argument_matches: dict[str, str] = Field(default_factory=dict)
    argument_not_matches: dict[str, str] = Field(default_factory=dict)
    path_under: list[str] | None = None
    path_not_under: list[str] | None = None

    _tools = field_validator("tool_in", "tool_not_in")(_known_tools)

    @field_validator("argument_matches", "argument_not_matches")
    @classmethod
    def _regexes(cls, value: dict[str, str]) -> dict[str, str]:
        for name, pattern in value.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{name}: {pattern!r} is not a regex ({exc})") from exc
        return value

    def passes(self, tool: str | None, arguments: dict[str, Any]) -> bool:
        if self.tool_in is not None and tool not in self.tool_in:
            return False
        if self.tool_not_in is not None and tool in self.tool_not_in:
            return False
        for names, pattern in self.argument_matches.items():
            if not re.search(pattern, _argument(arguments, names)):
                return False
        for names, pattern in self.argument_not_matches.items():
            if re.search(pattern, _argument(arguments, names)):
                return False
        if self.path_under is not None or self.path_not_under is not None:
            path = str(arguments.get("path", "")).lstrip("./")
            if not path:
                return False
            if self.path_under is not None and not path.startswith(tuple(self.path_under)):
                return False
            if self.path_not_under is not None and path.startswith(tuple(self.path_not_under)):
                return False
        return True


def _argument(arguments: dict[str, Any], names: str) -> str:
    """The first of `names` ("a|b") present in `arguments`, as text ("" if none)."""
    for name in names.split("|"):
        if name in arguments:
            return str(arguments[name])
    return ""


class CallSpec(_Strict):
    tool: str
    arguments: dict[str, Any]

    def call(self) -> ToolCall:
        return ToolCall.model_validate(self.model_dump())


class HistoryCall(CallSpec):
    output: str | None = None  # None: run the (read-only) call on the workspace


class ScenarioCaseSpec(_Strict):
    id: str = Field(min_length=1)
    workspace: str
    task: str = Field(min_length=1)
    history: list[HistoryCall] = Field(default_factory=list)
    correction: str = Field(min_length=1)
    demonstration: CallSpec
    violation: CallSpec
    names: list[str] = Field(default_factory=list)


class ScenarioFile(_Strict):
    name: str = Field(min_length=1)
    title: str
    rule: str
    tools: list[str]
    max_tokens: int = Field(gt=0)
    check: Check
    about: Check | None = None
    off_task: Check | None = None
    train: list[ScenarioCaseSpec] = Field(default_factory=list)
    held_out: list[ScenarioCaseSpec] = Field(min_length=1)
    # Where relative workspaces are resolved: the file's own directory.
    directory: Path = Field(default=Path("."), exclude=True)

    _tools = field_validator("tools")(_known_tools)

    def workspace(self, situation: ScenarioCaseSpec) -> Path:
        return (self.directory / situation.workspace).resolve()


def load_scenario_file(path: str | Path) -> ScenarioFile:
    """Read and validate one scenario file (.json or .toml); ScenarioFileError names the
    field that is wrong and the workspace that is missing."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioFileError(f"{path}: cannot read it ({exc.strerror})") from exc
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioFileError(f"{path}: not valid {path.suffix.lstrip('.')}: {exc}") from exc
    if not isinstance(data, dict):
        raise ScenarioFileError(f"{path}: expected an object with name, check, held_out, …")
    try:
        scenario = ScenarioFile.model_validate({**data, "directory": path.parent})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ScenarioFileError(f"{path}: {problems}") from exc
    for key in ("train", "held_out"):
        for i, situation in enumerate(getattr(scenario, key)):
            if not scenario.workspace(situation).is_dir():
                raise ScenarioFileError(
                    f"{path}: {key}.{i}.workspace: {scenario.workspace(situation)} "
                    "is not a directory"
                )
    return scenario


# -- judging a proposal ------------------------------------------------------------------------


@dataclass(frozen=True)
class Judged:
    """A proposal as a check sees it: tool and the arguments written so far."""

    tool: str | None
    arguments: dict[str, Any]
    complete: bool  # parsed as one whole valid call


_TOOL_RE = re.compile(r'"tool"\s*:\s*"(\w+)')
# A string argument, finished or cut off mid-string (the decode budget ran out).
_STR_ARG_RE = re.compile(r'"(\w+)"\s*:\s*"((?:[^"\\]|\\.)*)("?)')
_INT_ARG_RE = re.compile(r'"(\w+)"\s*:\s*(-?\d+)\s*[,}]')


def _unescape(body: str) -> str:
    body = body[:-1] if body.endswith("\\") and not body.endswith("\\\\") else body
    try:
        return str(json.loads(f'"{body}"'))
    except json.JSONDecodeError:
        return body


def judge_text(text: str, parse: Callable[[str], Any] | None = None) -> Judged:
    """The call in `text`: parsed whole when it is complete, else the fields written so far.

    `parse` is the renderer's `parse_call` (strict); a proposal cut at the token budget
    fails it and is read leniently: the tool name and every argument the model began.
    """
    if parse is not None:
        try:
            call = parse(text)
            return Judged(str(call.tool), dict(call.arguments), True)
        except ValueError:
            pass
    m = _TOOL_RE.search(text)
    tool = m.group(1) if m else None
    args: dict[str, Any] = {}
    start = text.find('"arguments"')
    body = text[start:] if start >= 0 else ""
    for key, value, _closed in _STR_ARG_RE.findall(body):
        if key != "arguments":
            args.setdefault(key, _unescape(value))
    for key, value in _INT_ARG_RE.findall(body):
        args.setdefault(key, int(value))
    return Judged(tool, args, False)


def judge_call(call: dict[str, Any]) -> Judged:
    return Judged(str(call["tool"]), dict(call["arguments"]), True)


# -- prompts and the held-out check --------------------------------------------------------------


def situation_messages(
    task: str,
    history: list[tuple[str, dict[str, Any], str]],
    bullets: list[str] | None = None,
) -> list[Message]:
    """The agent's own prompt for a situation: the task and the calls already made (with
    their outputs), as `Conversation` renders every turn."""
    conversation = Conversation(task)
    for tool, arguments, output in history:
        conversation.add_call(
            ToolCall(tool=tool, arguments=arguments),  # type: ignore[arg-type]
            ToolResult(ok=True, output=output),
        )
    return conversation.messages(bullets)


def tool_output(workspace: Path, tool: str, arguments: dict[str, Any]) -> str:
    """What a (read-only) history call prints on the workspace, run by the real tools."""
    result = ToolRunner(workspace, Settings(sandbox="none")).execute(
        ToolCall(tool=tool, arguments=arguments)  # type: ignore[arg-type]
    )
    return result.output


class HeldOutResult(BaseModel):
    situation: str
    complied: bool
    proposal: str


def check_held_out(policy: Sampler, scenario: ScenarioFile, seed: int = 0) -> list[HeldOutResult]:
    """Each held-out situation's greedy proposal under the current weights, judged by the
    scenario's check (the rule is not in the prompt: this is what the weights learned)."""
    results = []
    for situation in scenario.held_out:
        workspace = scenario.workspace(situation)
        history = [
            (
                h.tool,
                h.arguments,
                h.output if h.output is not None else tool_output(workspace, h.tool, h.arguments),
            )
            for h in situation.history
        ]
        prompt = policy.renderer.render_prompt(situation_messages(situation.task, history))
        params = SampleParams(
            temperature=0.0, max_tokens=scenario.max_tokens, seed=seed, tools=scenario.tools
        )
        completion = policy.sample(prompt, params)
        judged = judge_text(completion.text, policy.renderer.parse_call)
        results.append(
            HeldOutResult(
                situation=situation.id,
                complied=scenario.check.passes(judged.tool, judged.arguments),
                proposal=completion.text,
            )
        )
    return results
