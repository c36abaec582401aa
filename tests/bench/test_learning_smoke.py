"""Smoke test of bench/learning: the scenario data (no model) and the mechanics (model).

The data tests guard the benchmark's validity: a held-out situation that shares a file,
a name or a task with any training situation would measure memorisation, not learning;
a checker that accepts the violating call (or rejects the demonstration) would measure
nothing. The model test runs every method once on one scenario at k = 1 and only checks
that the numbers exist and are finite (learning itself is what docs/evidence.md reports).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.learning.scenarios import (
    SCENARIOS,
    WORKSPACES,
    check_disjoint,
    judge_call,
    judge_text,
)


def test_held_out_disjoint_from_training_across_all_scenarios() -> None:
    assert check_disjoint() == []
    train_ids = {s.id for sc in SCENARIOS for s in sc.train}
    held_ids = {s.id for sc in SCENARIOS for s in sc.held_out}
    assert not train_ids & held_ids
    train_tasks = {s.task for sc in SCENARIOS for s in sc.train}
    assert not train_tasks & {s.task for sc in SCENARIOS for s in sc.held_out}
    # Files a held-out situation changes are never changed (or shown) in any training one.
    train_files = {(s.workspace, p) for sc in SCENARIOS for s in sc.train for p in s.paths()}
    for sc in SCENARIOS:
        for h in sc.held_out:
            assert not {(h.workspace, p) for p in h.paths()} & train_files, h.id


def test_check_disjoint_catches_a_leak() -> None:
    from dataclasses import replace

    sc = SCENARIOS[0]
    leaky = replace(sc, held_out=[replace(sc.held_out[0], task=sc.train[0].task)])
    assert check_disjoint([leaky])


def test_scenarios_are_complete_and_checkers_separate_demo_from_violation() -> None:
    assert {s.name for s in SCENARIOS} >= {
        "tool_choice", "package_manager", "logging", "scope",
        "command_prefix", "module_location", "test_naming", "commit_message",
    }  # fmt: skip
    for sc in SCENARIOS:
        assert len(sc.train) >= 8 and len(sc.held_out) >= 4, sc.name
        for s in [*sc.train, *sc.held_out]:
            assert sc.check(judge_call(s.demo)), s.id
            assert not sc.check(judge_call(s.violation)), s.id
            assert s.correction.strip()
            # A `write` may create its file (module_location, test_naming); every other
            # path the situation shows or changes is a real workspace file.
            created = {
                c["arguments"]["path"] for c in (s.demo, s.violation) if c["tool"] == "write"
            }
            for path in s.paths() - created:
                assert (WORKSPACES / s.workspace / path).is_file(), (s.id, path)


def test_the_new_scenarios_use_their_own_situations() -> None:
    """Issue 33's four: every held-out situation is new to every scenario's training (ids,
    tasks, names, files), and the dev subset names bundled scenarios."""
    from bench.learning.scenarios import DEV_SCENARIOS, scenario

    new = [
        scenario(n) for n in ("command_prefix", "module_location", "test_naming", "commit_message")
    ]
    assert check_disjoint() == []
    for sc in new:
        assert sc.train[0].workspace.endswith("py-lib"), sc.name
        assert {s.id for s in sc.train}.isdisjoint({s.id for s in sc.held_out})
    assert {scenario(n).name for n in DEV_SCENARIOS} == set(DEV_SCENARIOS)


def test_judge_reads_a_call_cut_at_the_token_budget() -> None:
    cut = '{"tool":"edit_lines","arguments":{"path":"src/a.py","start":3,"end":4,"content":"    logger.in'
    judged = judge_text(cut)
    assert judged.tool == "edit_lines" and not judged.complete
    assert judged.arguments["path"] == "src/a.py" and judged.arguments["start"] == 3
    assert judged.arguments["content"].startswith("    logger.in")
    assert judge_text('{"tool":"bash","arguments":{"cmd":"pnpm ad').arguments["cmd"] == "pnpm ad"


def test_iso_compliance_drift_compares_where_each_method_first_gets_there() -> None:
    from bench.learning.report import goals
    from bench.learning.suite import Point

    def point(scenario: str, method: str, k: int, compliance: float, drift: float) -> Point:
        return Point(scenario, method, k, compliance, 0.0, drift, 1.0, 0, 0)

    points = [
        point("a", "sdpo_token", 1, 0.0, 0.01),
        point("a", "sdpo_token", 2, 0.75, 0.02),
        point("a", "sdpo_token", 3, 1.0, 0.09),  # later and higher: not the first time
        point("a", "sft", 1, 0.0, 0.01),
        point("a", "sft", 2, 0.5, 0.03),
        point("a", "sft", 3, 0.75, 0.08),
        point("b", "sdpo_token", 1, 0.0, 0.01),
        point("b", "sft", 1, 1.0, 0.02),
    ]
    reach = goals(points)["drift_to_reach"]["sdpo_token"]
    assert reach["median_ratio"] == pytest.approx(0.02 / 0.08)
    assert reach["comparable_scenarios"] == 1 and reach["met"] is True
    assert reach["by_scenario"]["b"] == "only SFT reaches it (k=1)"


@pytest.mark.model
def test_every_method_gives_finite_numbers_at_k1(model_and_tokenizer: Any) -> None:
    from bench.learning.suite import METHODS, Bench, SuiteConfig, run_suite
    from continual_lsp.config import Settings
    from continual_lsp.policy.local.local_policy import LocalPolicy

    settings = Settings()
    policy = LocalPolicy(settings, model_and_tokenizer)
    # One scenario with the shortest proposals, one held-out situation: mechanics only.
    config = SuiteConfig(ks=[1], scenarios=["package_manager"], held_out=1, drift_prompts=1)
    points = run_suite(Bench(settings, policy, config))
    at_k1 = {p.method: p for p in points if p.k == 1}
    assert set(at_k1) == set(METHODS)
    for p in at_k1.values():
        assert 0.0 <= p.compliance <= 1.0
        assert math.isfinite(p.margin)
        assert p.drift_kl is not None and math.isfinite(p.drift_kl) and p.drift_kl >= 0
        assert math.isfinite(p.seconds_per_correction)
        assert len(p.proposals) == 1 or p.method in ("none", "context")
    for method in ("sdpo_token", "sdpo_topk", "sft"):
        assert at_k1[method].seconds_per_correction > 0
        assert at_k1[method].drift_kl > 0  # the step changed the adapter
        assert at_k1[method].context_tokens == 0
    assert at_k1["context"].context_tokens > 0
    assert at_k1["none"].drift_kl < 1e-6  # the base model: a zero adapter


def test_the_suite_runs_unchanged_on_the_tinker_backend(
    chatml_renderer: Any, tmp_path: Any
) -> None:
    """`--backend tinker`: a fresh remote policy per (method, scenario), sdpo_topk skipped
    (no full distribution remotely), drift n/a. The service is faked (unreachable here)."""
    from bench.learning.suite import Bench, SuiteConfig, run_suite
    from continual_lsp.config import Settings
    from tests.policy.tinker.tinker_fakes import Events, FakeTrainingClient, fake_tinker_policy

    made: list[FakeTrainingClient] = []

    def factory() -> Any:
        made.append(FakeTrainingClient(Events()))
        return fake_tinker_policy(chatml_renderer, tmp_path / f"adapters-{len(made)}", made[-1])

    settings = Settings(backend="tinker")
    config = SuiteConfig(ks=[1], scenarios=["scope"], held_out=1, drift_prompts=1)
    points = run_suite(Bench(settings, factory(), config, policy_factory=factory))
    at_k1 = {p.method: p for p in points if p.k == 1}
    assert set(at_k1) == {"sdpo_token", "sft", "context", "none"}
    assert all(p.drift_kl is None and math.isfinite(p.margin) for p in at_k1.values())
    assert (
        at_k1["sdpo_token"].seconds_per_correction > 0 and at_k1["sft"].seconds_per_correction > 0
    )
    # one policy to start, one per reset: the scenario's base run and each trained method
    assert len(made) == 1 + 1 + 3
    trained = [client for client in made if client.optim_calls]
    assert len(trained) == 2  # sdpo_token and sft each took their one step


def test_through_agent_headline_reads_the_issue_numbers() -> None:
    from bench.learning.through_agent import headline

    rows = [{"k": 0, "compliance": 0.0, "shown": 0.0}] + [
        {"k": k, "compliance": k / 10, "shown": k / 4, "follows": [k % 2 == 0, True]}
        for k in range(1, 6)
    ]
    got = headline({"rows": rows})
    assert got == {"retry_follows": 0.7, "shown_at_3": 0.75, "weights_at_5": 0.5}
    # A shorter run does not claim a number it did not reach.
    assert headline({"rows": rows[:3]})["weights_at_5"] is None
