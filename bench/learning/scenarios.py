"""Correction scenarios, read from data files (`bench/learning/scenarios/*.json`).

Each scenario teaches one rule. A *case* (`ScenarioCase`, the same record for a
training one; `ScenarioCaseSpec` in the file) is one agent turn on a sample workspace in
`examples/bench-workspaces/`: the task, the calls already made in it (their results are
produced by the real tools on the workspace files, so prompts look exactly like the
agent's), the reviewer's correction when the agent breaks the rule, the call the reviewer
would accept (the demonstration, given as an edit) and a call that breaks the rule (for the
log-probability margin). Held-out situations use other files, other names and other tasks
than every training situation of every scenario (`check_disjoint` asserts it), so a method
that only memorised its training calls scores nothing there.

The file format, its validation and the declarative check are the product's own
(`continual_lsp.agent.scenarios`, also behind `continual-lsp check FILE`); this module
turns files into the bench's `Scenario` records. Checks judge a proposal that may have
been cut at the scenario's token budget (sized to reach the field being judged), so they
take a `Judged` call whose arguments are those the model finished or started writing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from continual_lsp.agent.scenarios import (
    Judged,
    ScenarioCaseSpec,
    ScenarioFile,
    judge_call,
    judge_text,
    load_scenario_file,
)

REPO = Path(__file__).resolve().parents[2]
WORKSPACES = REPO / "examples" / "bench-workspaces"
# The order the bench runs them in (and always has: results stay comparable); the four
# of issue 33 come after the first four.
SCENARIO_FILES = [
    Path(__file__).parent / "scenarios" / f"{name}.json"
    for name in (
        "tool_choice",
        "package_manager",
        "logging",
        "scope",
        "command_prefix",
        "module_location",
        "test_naming",
        "commit_message",
    )
]
# `--scenarios dev`: the subset a recipe's learning check runs (scripts/check_starter_learns.sh),
# one of each kind of judged field: a tool, a bash command, written text, a path.
DEV_SCENARIOS = ("tool_choice", "package_manager", "logging", "module_location")

__all__ = [
    "DEV_SCENARIOS",
    "SCENARIOS",
    "SCENARIO_FILES",
    "WORKSPACES",
    "Judged",
    "Scenario",
    "ScenarioCase",
    "check_disjoint",
    "judge_call",
    "judge_text",
    "load_scenarios",
    "scenario",
    "select",
]


@dataclass(frozen=True)
class ScenarioCase:
    id: str
    workspace: str  # the workspace directory (absolute)
    task: str
    # Calls already made in this turn's conversation: (tool, arguments, output). Output
    # None = run the call (read-only) on the workspace to get the real tool output.
    history: tuple[tuple[str, dict[str, Any], str | None], ...]
    demo: dict[str, Any]  # the call the reviewer accepts (ToolCall dump)
    violation: dict[str, Any]  # a call that breaks the rule
    correction: str  # what the reviewer types when denying a violating proposal
    names: tuple[str, ...]  # identifiers / packages / scripts the situation is about

    def paths(self) -> set[str]:
        """Workspace files this situation shows or touches."""
        out = {str(a["path"]) for _, a, _ in self.history if isinstance(a.get("path"), str)}
        for call in (self.demo, self.violation):
            path = call["arguments"].get("path")
            if isinstance(path, str):
                out.add(path)
        return out


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    rule: str  # the context lane's bullet (one per rule, however many corrections)
    tools: list[str]  # tools the grammar allows at this decision (isolates the rule)
    max_tokens: int  # decode budget: enough to reach the judged field
    check: Callable[[Judged], bool]
    check_doc: str
    # Whether the rule speaks of a call at all (the file's `about`; default: its tools):
    # what the scripted reviewer judges, the rest it lets run.
    about: Callable[[Judged], bool]
    # Calls that leave the task before the rule's call came (the file's `off_task`;
    # default: none): the scripted reviewer denies them with the correction.
    off_task: Callable[[Judged], bool] = lambda _call: False
    train: list[ScenarioCase] = field(default_factory=list)
    held_out: list[ScenarioCase] = field(default_factory=list)


def _case(data: ScenarioFile, s: ScenarioCaseSpec) -> ScenarioCase:
    return ScenarioCase(
        id=s.id,
        workspace=str(data.workspace(s)),
        task=s.task,
        history=tuple((h.tool, h.arguments, h.output) for h in s.history),
        demo=s.demonstration.model_dump(),
        violation=s.violation.model_dump(),
        correction=s.correction,
        names=tuple(s.names),
    )


def load_scenarios(paths: Iterable[str | Path]) -> list[Scenario]:
    """Scenarios from files (ScenarioFileError names a malformed file's field)."""
    out = []
    for path in paths:
        data = load_scenario_file(path)
        out.append(
            Scenario(
                name=data.name,
                title=data.title,
                rule=data.rule,
                tools=list(data.tools),
                max_tokens=data.max_tokens,
                check=lambda c, check=data.check: check.passes(c.tool, c.arguments),
                check_doc=data.check.doc,
                about=(
                    (lambda c, tools=tuple(data.tools): c.tool in tools)
                    if data.about is None
                    else (lambda c, about=data.about: about.passes(c.tool, c.arguments))
                ),
                off_task=(
                    (lambda _c: False)
                    if data.off_task is None
                    else (lambda c, off=data.off_task: off.passes(c.tool, c.arguments))
                ),
                train=[_case(data, s) for s in data.train],
                held_out=[_case(data, s) for s in data.held_out],
            )
        )
    return out


SCENARIOS: list[Scenario] = load_scenarios(SCENARIO_FILES)


def scenario(name: str) -> Scenario:
    for s in SCENARIOS:
        if s.name == name:
            return s
    raise KeyError(f"unknown scenario {name!r}; known: {[s.name for s in SCENARIOS]}")


def select(entries: Iterable[str]) -> list[Scenario]:
    """`--scenarios`: each entry a bundled scenario's name or a scenario file (.json,
    .toml), in the order given."""
    out = []
    for entry in entries:
        if entry.endswith((".json", ".toml")):
            out.extend(load_scenarios([entry]))
        else:
            out.append(scenario(entry))
    return out


def check_disjoint(scenarios: list[Scenario] | None = None) -> list[str]:
    """Problems that would let a held-out situation leak from training (empty = none).

    Across all scenarios: no held-out situation shares an id, a task text, a name or a
    file it changes with any training situation; held-out files are not even *shown* in
    a training situation of the same workspace.
    """
    scenarios = scenarios if scenarios is not None else SCENARIOS
    train = [s for sc in scenarios for s in sc.train]
    held = [s for sc in scenarios for s in sc.held_out]
    problems = []
    ids = {s.id for s in train}
    tasks = {s.task.strip().lower() for s in train}
    names = {n.lower() for s in train for n in s.names}
    shown = {(s.workspace, p) for s in train for p in s.paths()}
    for h in held:
        if h.id in ids:
            problems.append(f"{h.id}: id also used for training")
        if h.task.strip().lower() in tasks:
            problems.append(f"{h.id}: task text also used for training")
        if {n.lower() for n in h.names} & names:
            problems.append(f"{h.id}: names {sorted({n.lower() for n in h.names} & names)} trained")
        leaked = {(h.workspace, p) for p in h.paths()} & shown
        if leaked:
            problems.append(f"{h.id}: files {sorted(p for _, p in leaked)} seen in training")
    return problems
