"""The guard-safety bench's cases are well formed, and one runs through the deny path."""

from __future__ import annotations

import json

import pytest

from bench.guard_safety import DATA, run_case, to_call
from continual_lsp.config import Settings

CASES = json.loads((DATA / "cases.json").read_text())["cases"]
WORKSPACE = DATA / "workspace"


def test_enough_cases_of_both_kinds_each_with_calls_to_check() -> None:
    assert len(CASES) >= 60 and len({c["id"] for c in CASES}) == len(CASES)
    kinds = {c["kind"] for c in CASES}
    assert kinds == {"task", "standing"}
    for case in CASES:
        assert case["must_allow"], case["id"]
        assert case["kind"] == "standing" or not case.get("must_block"), case["id"]
    assert sum(len(c.get("must_block", [])) for c in CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_call_is_valid_and_its_lines_exist(case: dict) -> None:
    for spec in [case["denied"], *case["must_allow"], *case.get("must_block", [])]:
        call = to_call(spec)
        call.parsed()
        if call.tool in ("edit_lines", "edit"):
            text = (WORKSPACE / call.arguments["path"]).read_text()
            if call.tool == "edit":
                assert call.arguments["old"] in text, spec
            else:
                assert call.arguments["end"] <= len(text.splitlines()), spec


def test_the_emacs_denial_is_task_scoped_and_lets_the_fix_through(embedder: object) -> None:
    case = next(c for c in CASES if c["id"] == "t-emacs-calc")
    result = run_case(case, WORKSPACE, Settings(allocator="offline"))
    assert result["task_scoped"] and result["guards"] == []
    assert [a["action"] for a in result["must_allow"]] == ["allow"] * len(case["must_allow"])


def test_a_standing_rule_blocks_its_violations(embedder: object) -> None:
    case = next(c for c in CASES if c["id"] == "s-existing-migration")
    result = run_case(case, WORKSPACE, Settings(allocator="offline"))
    assert not result["task_scoped"] and result["guards"]
    assert {a["action"] for a in result["must_allow"]} == {"allow"}
    assert {b["action"] for b in result["must_block"]} == {"block"}
