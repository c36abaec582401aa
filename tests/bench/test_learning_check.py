"""The recipe's learning check decides on weights_at_5 over the shipped run's scenarios."""

from __future__ import annotations

import json
from pathlib import Path

from bench.learning.learning_check import main, verdict


def summary(**weights: float | None) -> dict[str, object]:
    return {
        "scenarios": {
            name: {"retry_follows": 1.0, "shown_at_3": 0.75, "weights_at_5": w}
            for name, w in weights.items()
        }
    }


def test_a_candidate_that_learns_less_is_not_shipped() -> None:
    ok, text = verdict(summary(a=0.5, b=0.25), summary(a=0.25, b=0.25))
    assert not ok
    assert "not shipped: learns less than the one it replaces" in text
    assert "shipped 0.375  candidate 0.250" in text  # both numbers printed


def test_equal_or_more_ships() -> None:
    assert verdict(summary(a=0.5, b=0.0), summary(a=0.0, b=0.5))[0]
    assert verdict(summary(a=0.0), summary(a=0.25))[0]


def test_a_scenario_the_candidate_did_not_reach_counts_as_zero() -> None:
    ok, _ = verdict(summary(a=0.25, b=0.25), summary(a=0.5, b=None))
    assert ok  # 0.25 vs 0.25
    ok, _ = verdict(summary(a=0.25, b=0.25), summary(a=0.25))
    assert not ok  # b missing: 0.125 < 0.25


def test_nothing_measured_is_never_a_pass() -> None:
    assert not verdict({"scenarios": {}}, summary(a=1.0))[0]


def test_exit_status(tmp_path: Path) -> None:
    shipped, candidate = tmp_path / "s.json", tmp_path / "c.json"
    shipped.write_text(json.dumps(summary(a=0.5)))
    candidate.write_text(json.dumps(summary(a=0.25)))
    assert main([str(shipped), str(candidate)]) == 1
    assert main([str(candidate), str(shipped)]) == 0


def skill(one_step: float, multi_step: float) -> dict[str, object]:
    return {
        "starter": {
            "one_step": {"finished": one_step, "on_target": 1.0},
            "multi_step": {"finished": multi_step},
        }
    }


def test_a_candidate_that_learns_more_but_finishes_fewer_tasks_is_not_shipped(
    tmp_path: Path,
) -> None:
    """The 2026-12-07 candidate: more learned (0.25 against 0.125), 27/36 one-step
    against 29/36: the four-file form stops it, and prints both skill numbers."""
    files = {
        "s.json": summary(a=0.125),
        "c.json": summary(a=0.25),
        "ss.json": skill(29 / 36, 13 / 24),
        "cs.json": skill(27 / 36, 12 / 24),
        "better.json": skill(29 / 36, 14 / 24),
    }
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    paths = {name: str(tmp_path / name) for name in files}
    assert main([paths["s.json"], paths["c.json"]]) == 0
    assert main([paths["s.json"], paths["c.json"], paths["ss.json"], paths["cs.json"]]) == 1
    assert main([paths["s.json"], paths["c.json"], paths["ss.json"], paths["better.json"]]) == 0
    assert main([paths["s.json"], paths["c.json"], paths["ss.json"]]) == 2
