"""through_agent.py's arithmetic and evidence (no model): forgetting, the k = 0 gate, and
that a partial run never erases numbers another run measured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.learning import through_agent
from bench.learning.through_agent import acceptance, forgetting_numbers


def test_kept_fraction_is_after_over_before() -> None:
    got = forgetting_numbers(0.75, 0.5, 31 / 36, 29 / 36)
    assert got["kept_fraction"] == pytest.approx(0.667)
    assert got["agent_skill_drop"] == pytest.approx(5.6)  # points of one-step finished


def test_acceptance_needs_both_bars_of_issue_33() -> None:
    def h(follows: float | None, shown: float, weights: float) -> dict[str, float | None]:
        return {"retry_follows": follows, "shown_at_3": shown, "weights_at_5": weights}

    good = {f"s{i}": h(0.8, 0.75, 0.5) for i in range(8)}
    assert acceptance(good)["met"] and acceptance(good)["learned_bar"] == 6
    # weights without being shown at the 3rd correction do not count as learned
    two_short = {**good, "s0": h(0.8, 0.5, 1.0), "s1": h(None, 0.75, 0.25), "s2": h(0.9, 0.9, 0.4)}
    bars = acceptance(two_short)
    assert bars["learned"] == ["s3", "s4", "s5", "s6", "s7"] and not bars["met"]
    assert bars["follows"] == ["s0", "s2", "s3", "s4", "s5", "s6", "s7"]  # 7 of 8: enough
    assert acceptance({**good, "s0": h(0.5, 0.75, 0.5), "s1": h(0.7, 0.75, 0.5)})["met"] is False


def test_kept_fraction_edges() -> None:
    # Nothing learned: nothing to keep, not "kept 0 %" nor "kept all".
    assert forgetting_numbers(0.0, 0.25, None, None) == {
        "kept_fraction": None,
        "agent_skill_drop": None,
    }
    assert forgetting_numbers(0.5, 0.75, None, None)["kept_fraction"] == 1.0
    assert forgetting_numbers(1.0, 0.0, 0.8, 0.9)["kept_fraction"] == 0.0
    assert forgetting_numbers(1.0, 0.0, 0.8, 0.9)["agent_skill_drop"] == pytest.approx(-10.0)


def _evidence(tmp_path: Path) -> Path:
    path = tmp_path / "through_agent_deny.json"
    path.write_text(
        json.dumps(
            {
                "scenarios": {
                    "scope": {"retry_follows": 1.0, "shown_at_3": 1.0, "weights_at_5": 0.25}
                },
                "without_starter": {"scope": {"weights_at_5": 0.0}},
            }
        )
    )
    return path


def test_forgetting_writes_only_what_was_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    evidence = _evidence(tmp_path)
    monkeypatch.setattr(through_agent, "REPO", tmp_path)

    def fake(first: Any, second: Any, args: Any) -> dict[str, Any]:
        return {
            "first_before": 0.5,
            "first_after": 0.25,
            "lessons_second": 8,
            **forgetting_numbers(0.5, 0.25, None, None),  # skill not measured
        }

    monkeypatch.setattr(through_agent, "run_forgetting", fake)
    args = ["--forgetting", "logging", "scope", "--evidence", str(evidence)]
    assert through_agent.main(args) == 0
    data = json.loads(evidence.read_text())
    assert data["forgetting"] == {"kept_fraction": 0.5, "pair": ["logging", "scope"]}
    assert data["scenarios"]["scope"]["weights_at_5"] == 0.25  # untouched
    assert (tmp_path / "bench/learning/results/forgetting-logging-scope.json").is_file()


def test_a_run_of_some_scenarios_keeps_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    evidence = _evidence(tmp_path)
    monkeypatch.setattr(through_agent, "REPO", tmp_path)
    rows = [{"k": 0, "compliance": 0.0, "shown": 0.0, "margin": 0.0, "drift": 0.0}] + [
        {"k": k, "compliance": 0.5, "shown": 0.75, "margin": 1.0, "drift": 0.0, "follows": [True]}
        for k in range(1, 6)
    ]
    monkeypatch.setattr(
        through_agent,
        "run_scenario",
        lambda sc, args: {
            "scenario": sc.name,
            "reviewer": "deny",
            "wall_s": 1,
            "rows": rows,
            "lanes": [],
        },
    )
    assert through_agent.main(["--scenarios", "test_naming", "--evidence", str(evidence)]) == 0
    data = json.loads(evidence.read_text())
    assert set(data["scenarios"]) == {"scope", "test_naming"}
    assert data["scenarios"]["test_naming"] == {
        "retry_follows": 1.0,
        "shown_at_3": 0.75,
        "weights_at_5": 0.5,
    }
    assert data["without_starter"] == {"scope": {"weights_at_5": 0.0}}


def test_baseline_fails_a_scenario_that_does_not_start_at_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(through_agent, "REPO", tmp_path)
    seen: list[str] = []

    def fake(scenarios: list[Any], args: Any) -> dict[str, float]:
        seen.extend(s.name for s in scenarios)
        return {s.name: (0.25 if s.name == "scope" else 0.0) for s in scenarios}

    monkeypatch.setattr(through_agent, "baseline", fake)
    assert through_agent.main(["--baseline", "--scenarios", "dev"]) == 0
    assert seen == ["tool_choice", "package_manager", "logging", "module_location"]
    assert through_agent.main(["--baseline", "--scenarios", "scope", "logging"]) == 1


def test_forgetting_teaches_first_then_eight_of_second_then_measures_first_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import argparse

    from bench.learning.scenarios import scenario
    from continual_lsp.policy.local import adapter_files

    calls: list[tuple[str, str, int]] = []
    settings_seen: list[Any] = []

    class FakeAgent:
        def close(self) -> None:
            calls.append(("close", "", 0))

    def fake_agent(settings: Any, work: Path, sc: Any) -> FakeAgent:
        settings_seen.append(settings)
        calls.append(("agent", sc.name, 0))
        return FakeAgent()

    def fake_teach(
        agent: Any, settings: Any, config: Any, sc: Any, count: int, args: Any
    ) -> list[dict[str, Any]]:
        calls.append(("teach", sc.name, count))
        return [
            {"k": k, "compliance": 0.5 if sc.name == "logging" else 1.0}
            for k in range(1, count + 1)
        ]

    def fake_measure(
        agent: Any, settings: Any, config: Any, sc: Any
    ) -> tuple[float, float, float, None]:
        calls.append(("measure", sc.name, 0))
        return 0.25, 1.0, 0.0, None

    monkeypatch.setattr(through_agent, "_agent", fake_agent)
    monkeypatch.setattr(through_agent, "teach", fake_teach)
    monkeypatch.setattr(through_agent, "measure", fake_measure)
    monkeypatch.setattr(adapter_files, "list_adapters", lambda *a, **k: [])
    args = argparse.Namespace(
        corrections=5,
        held_out=4,
        reviewer="deny",
        no_starter=False,
        settings=[],
        skill_tasks=36,
        tag="",
    )
    result = through_agent.run_forgetting(scenario("logging"), scenario("scope"), args)
    assert calls == [
        ("agent", "logging", 0),
        ("teach", "logging", 5),
        ("close", "", 0),
        ("agent", "scope", 0),
        ("teach", "scope", 8),
        ("measure", "logging", 0),  # the first rule, on the adapter after the second's lessons
        ("close", "", 0),
    ]
    # One store and one adapters dir: the second agent continues the first's lineage.
    assert settings_seen[0].store_path == settings_seen[1].store_path
    assert settings_seen[0].adapters_dir == settings_seen[1].adapters_dir
    assert (result["first_before"], result["first_after"], result["kept_fraction"]) == (
        0.5,
        0.25,
        0.5,
    )
    # No adapter was saved: the skill bench had nothing to compare, so it did not run.
    assert result["agent_skill_drop"] is None and result["adapter"] is None


def test_the_reviewer_overrides_a_blocked_call_it_wants_and_never_approves_it() -> None:
    """A blocked proposal offers no approve (issue 31): the scripted reviewer lets a call it
    wants run through override, and approves a call no guard blocks."""
    from types import SimpleNamespace

    from continual_lsp.tools.base import ToolCall

    decided: list[str] = []

    class Agent:
        def decide(self, proposal_id: str, decision: str, *args: Any, **kw: Any) -> Any:
            if decision == "approve" and proposal_id == "blocked":
                raise AssertionError("approve of a blocked proposal")
            decided.append(decision)
            return SimpleNamespace(next_proposal=None)

    scenario = SimpleNamespace(
        tools={"bash"},
        check=lambda judged: True,
        about=lambda judged: judged.tool == "bash",
        off_task=lambda judged: False,
    )
    call = ToolCall(tool="bash", arguments={"cmd": "pnpm test"})
    for pid, blocked in (("blocked", "a guard says no"), ("free", None)):
        proposal = SimpleNamespace(id=pid, call=call, blocked_by=blocked)
        through_agent.review(Agent(), scenario, None, proposal, "deny")
    assert decided == ["override", "approve"]


def test_the_reviewer_judges_only_the_calls_the_rule_is_about() -> None:
    """Under a commit-message rule the reviewer lets the tests run and denies only a
    commit whose message breaks it (it once denied `pytest` with "Use Conventional
    Commits")."""
    from types import SimpleNamespace

    from bench.learning.scenarios import scenario
    from continual_lsp.tools.base import ToolCall

    commit_message = scenario("commit_message")
    script = iter(
        [
            ToolCall(tool="bash", arguments={"cmd": "python3 -m pytest -q"}),
            ToolCall(tool="bash", arguments={"cmd": 'git commit -m "fixed it"'}),
            ToolCall(tool="bash", arguments={"cmd": 'git commit -m "fix(gauge): no zero"'}),
        ]
    )
    decided: list[str] = []

    def proposal() -> Any:
        return SimpleNamespace(id=str(len(decided)), call=next(script), blocked_by=None)

    class Agent:
        def decide(self, proposal_id: str, decision: str, *args: Any, **kw: Any) -> Any:
            decided.append(decision)
            return SimpleNamespace(
                next_proposal=proposal() if decision != "approve" or len(decided) < 3 else None
            )

    situation = commit_message.train[0]
    counts = through_agent.review(Agent(), commit_message, situation, proposal(), "deny")
    assert decided == ["approve", "deny", "approve"]
    assert counts["outside_rule"] == 1 and counts["denied"] == 1 and counts["follows"] == [True]


def test_a_call_that_leaves_the_task_is_denied_with_the_correction() -> None:
    """Asked to commit a staged fix, the agent edited the code and said done, and every
    edit was approved as a call the rule is not about: the rule was never reached. Now
    an edit, or a `done`, before the commit is denied with the situation's correction;
    running the tests still is not."""
    from types import SimpleNamespace

    from bench.learning.scenarios import scenario
    from continual_lsp.tools.base import ToolCall

    commit_message = scenario("commit_message")
    script = iter(
        [
            ToolCall(tool="bash", arguments={"cmd": "python3 -m pytest -q"}),
            ToolCall(tool="edit", arguments={"path": "src/a.py", "old": "x", "new": "y"}),
            ToolCall(tool="done", arguments={"summary": "fixed the division"}),
            ToolCall(tool="bash", arguments={"cmd": 'git commit -m "fix(gauge): no zero"'}),
        ]
    )
    decided: list[tuple[str, str | None]] = []

    def proposal() -> Any:
        return SimpleNamespace(id=str(len(decided)), call=next(script), blocked_by=None)

    class Agent:
        def decide(self, proposal_id: str, decision: str, *args: Any, **kw: Any) -> Any:
            decided.append((decision, kw.get("correction")))
            return SimpleNamespace(next_proposal=proposal() if len(decided) < 4 else None)

    situation = commit_message.train[0]
    counts = through_agent.review(Agent(), commit_message, situation, proposal(), "deny")
    fix = situation.correction
    assert decided == [("approve", None), ("deny", fix), ("deny", fix), ("approve", None)]
    assert counts["off_task"] == 2 and counts["denied"] == 2 and counts["follows"] == [False, True]
