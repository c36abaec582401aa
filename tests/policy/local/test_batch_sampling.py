"""Batched candidates (`LocalPolicy.sample_batch`) on the real embedded model."""

from __future__ import annotations

from typing import Any

import pytest

from continual_lsp.config import Settings
from continual_lsp.policy.base import Message, SampleParams
from continual_lsp.policy.local.candidate_tree import without_stragglers
from continual_lsp.policy.local.local_policy import LocalPolicy

pytestmark = pytest.mark.model

TASK = "Task: add a function `median(xs)` to src/calc/ops.py"


@pytest.fixture(scope="module")
def policy(model_and_tokenizer: tuple[Any, Any]) -> LocalPolicy:
    return LocalPolicy(Settings(), model_and_tokenizer)


def test_greedy_rows_equal_the_single_greedy_call(policy: LocalPolicy) -> None:
    """Each row computes what it would alone: padding and position ids must not leak."""
    prompt = policy.renderer.render_prompt([Message(role="user", content=TASK)])
    params = SampleParams(temperature=0.0, max_tokens=120)
    single = policy.sample(prompt, params)
    rows = policy.sample_batch(prompt, params, 3)
    for row in rows:
        assert row.tokens == single.tokens
        assert row.logprobs == pytest.approx(single.logprobs, abs=2e-3)


def test_sampled_rows_parse_match_scoring_and_repeat_with_the_seed(policy: LocalPolicy) -> None:
    """Rows of different lengths (different chunks each step) still score like `logprobs`."""
    prompt = policy.renderer.render_prompt([Message(role="user", content=TASK)])
    params = SampleParams(temperature=1.0, seed=5, max_tokens=120)
    rows = policy.sample_batch(prompt, params, 4)
    assert len({tuple(r.tokens) for r in rows}) > 1, "seeded rows should differ"
    parsed = 0
    for row in rows:
        scored = policy.logprobs(prompt, row.tokens)
        assert row.logprobs == pytest.approx(scored, abs=2e-3)
        try:
            policy.renderer.parse_call(row.text)
            parsed += 1
        except ValueError:
            pass  # a rambling row, cut once half had finished (`without_stragglers`)
    assert 2 * parsed >= len(rows)
    again = policy.sample_batch(prompt, params, 4)
    assert [r.tokens for r in again] == [r.tokens for r in rows]


def test_greedy_rows_lead_the_sampled_ones(policy: LocalPolicy) -> None:
    """A retry's candidates always include the model's best guess."""
    prompt = policy.renderer.render_prompt([Message(role="user", content=TASK)])
    greedy = policy.sample(prompt, SampleParams(temperature=0.0, max_tokens=120))
    params = SampleParams(temperature=1.0, seed=5, max_tokens=120, greedy_rows=1)
    rows = policy.sample_batch(prompt, params, 4)
    assert rows[0].tokens == greedy.tokens
    assert any(r.tokens != greedy.tokens for r in rows[1:])


def test_logprobs_batch_scores_each_completion_as_logprobs_does(policy: LocalPolicy) -> None:
    """One prefill and one batched pass: right padding must not change a shorter row."""
    prompt = policy.renderer.render_prompt([Message(role="user", content=TASK)])
    rows = policy.sample_batch(prompt, SampleParams(temperature=1.0, seed=7, max_tokens=120), 3)
    completions = [r.tokens for r in rows] + [[], rows[0].tokens[:5]]
    assert len({len(c) for c in completions}) > 2, "rows of different lengths"
    batched = policy.logprobs_batch(prompt, completions)
    assert batched[3] == []
    for completion, scored in zip(completions, batched, strict=True):
        if completion:
            assert scored == pytest.approx(policy.logprobs(prompt, completion), abs=1e-3)


def test_a_rambling_sampled_row_is_cut_once_half_have_finished() -> None:
    """Rows 0-5, lengths after this step; rows 3-5 are still running. Rows 0-2 finished
    (longest 40), so the bound is 80: sampled row 4 (81) is cut, row 5 (80) is not, and
    greedy row 0 never is."""
    live = [(3, [7]), (4, [7]), (5, [7])]
    lengths = [40, 38, 39, 50, 81, 80]
    assert without_stragglers(live, lengths, greedy_rows=0) == [(3, [7]), (5, [7])]
    # Fewer than half finished: nothing is cut yet, however long.
    assert without_stragglers(live, [40, 38, 99, 50, 181, 80], greedy_rows=0) == [
        (3, [7]), (4, [7]), (5, [7])
    ]  # fmt: skip
    # A greedy row runs to its end.
    greedy_long = [(0, [7]), (4, [7])]
    assert without_stragglers(greedy_long, [181, 38, 39, 40, 181, 30], greedy_rows=1) == [(0, [7])]
