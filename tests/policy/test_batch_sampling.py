"""Batched candidates (`LocalPolicy.sample_batch`) on the real embedded model."""

from __future__ import annotations

from typing import Any

import pytest

from continual_lsp.config import Settings
from continual_lsp.policy.base import Message, SampleParams
from continual_lsp.policy.local import LocalPolicy

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
    for row in rows:
        policy.renderer.parse_call(row.text)
        scored = policy.logprobs(prompt, row.tokens)
        assert row.logprobs == pytest.approx(scored, abs=2e-3)
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
