"""LocalPolicy sampling on the real embedded model (SmolLM2-135M-Instruct, CPU).

Prompts are one short task each (~275 tokens with the system prompt), so the whole file
runs in well under two minutes on two cores.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from bench.tasks import SAMPLE_TASKS
from continual_lsp.config import Settings
from continual_lsp.policy.base import Completion, LogitScorer, Message, Policy, SampleParams
from continual_lsp.policy.local.local_policy import LocalPolicy
from continual_lsp.tools.base import TOOL_NAMES, ToolCall, ToolResult

pytestmark = pytest.mark.model

# 10 tasks x (greedy, sampled with a seed) = 20 proposals.
CASES = [(task, 0.0, None) for task in SAMPLE_TASKS] + [
    (task, 1.0, seed) for seed, task in enumerate(SAMPLE_TASKS)
]


@pytest.fixture(scope="module")
def policy(model_and_tokenizer: tuple[Any, Any]) -> LocalPolicy:
    return LocalPolicy(Settings(), model_and_tokenizer)


@pytest.fixture(scope="module")
def samples(policy: LocalPolicy) -> list[tuple[list[int], Completion]]:
    out = []
    for task, temperature, seed in CASES:
        prompt = policy.renderer.render_prompt([Message(role="user", content=f"Task: {task}")])
        params = SampleParams(temperature=temperature, seed=seed, max_tokens=160)
        out.append((prompt, policy.sample(prompt, params)))
    return out


def test_policy_satisfies_protocol(policy: LocalPolicy) -> None:
    assert isinstance(policy, Policy)
    assert isinstance(policy.logit_scorer(), LogitScorer)
    assert policy.backend == "local"
    assert policy.adapter_version is None
    policy.adapter_version = "v1"  # adapter_files.py sets it after a step / load
    assert policy.adapter_version == "v1"
    policy.adapter_version = None


def test_shared_fixture_model_is_not_mutated(
    policy: LocalPolicy, model_and_tokenizer: tuple[Any, Any]
) -> None:
    base = model_and_tokenizer[0]
    assert not any("lora" in name for name, _ in base.named_modules())
    assert any("lora" in name for name, _ in policy.model.named_modules())


def test_twenty_proposals_all_parse(
    policy: LocalPolicy, samples: list[tuple[list[int], Completion]]
) -> None:
    tools = set()
    for (task, temperature, _), (_, completion) in zip(CASES, samples, strict=True):
        call = policy.renderer.parse_call(completion.text)  # raises on an invalid call
        assert call.tool in TOOL_NAMES
        call.parsed()
        tools.add(call.tool)
        assert completion.tokens[-1] == policy.renderer.end_of_turn_id, (task, temperature)
        assert len(completion.logprobs) == len(completion.tokens)
        assert 0 < completion.forced < len(completion.tokens)
        assert all(lp <= 0.0 for lp in completion.logprobs)
        # The sampled tokens are exactly what the renderer would write for that call text.
        assert policy.renderer.decode(completion.tokens[:-1]) == completion.text
    assert len(tools) >= 2  # varied tasks give varied tools, not one memorised answer


def test_recorded_logprobs_equal_scoring(
    policy: LocalPolicy, samples: list[tuple[list[int], Completion]]
) -> None:
    # SDPO's ratios use sample-time logprobs as old_logprobs: they must be what a later
    # one-pass scoring of the same tokens gives, forced tokens included.
    for prompt, completion in samples:
        scored = policy.logprobs(prompt, completion.tokens)
        assert len(scored) == len(completion.tokens)
        worst = max(abs(a - b) for a, b in zip(scored, completion.logprobs, strict=True))
        assert worst < 1e-4


def test_seeded_sampling_is_reproducible(
    policy: LocalPolicy, samples: list[tuple[list[int], Completion]]
) -> None:
    prompt, first = samples[len(SAMPLE_TASKS)]  # temperature 1, seed 0
    again = policy.sample(prompt, SampleParams(temperature=1.0, seed=0, max_tokens=160))
    assert again.tokens == first.tokens
    prompt, greedy = samples[0]
    assert policy.sample(prompt, SampleParams(max_tokens=160)).tokens == greedy.tokens


def test_reference_logprobs_disable_the_adapter(
    policy: LocalPolicy, samples: list[tuple[list[int], Completion]]
) -> None:
    prompt, completion = samples[0]
    # A fresh adapter (LoRA B = 0) is the base model.
    reference = policy.reference_logprobs(prompt, completion.tokens)
    current = policy.logprobs(prompt, completion.tokens)
    # 1e-4, not exact: `logprobs` reuses the prompt cache's KV (computed in other chunks).
    assert max(abs(a - b) for a, b in zip(reference, current, strict=True)) < 1e-4
    lora_b = [p for n, p in policy.model.named_parameters() if "lora_B" in n]
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in lora_b:
            p.copy_(torch.randn(p.shape, generator=generator) * 0.05)
    try:
        moved = policy.logprobs(prompt, completion.tokens)
        assert max(abs(a - b) for a, b in zip(moved, reference, strict=True)) > 1e-3
        # The prompt cache holds K/V of the old weights for this prompt: it must not be used.
        resampled = policy.sample(prompt, SampleParams(max_tokens=160))
        rescored = policy.logprobs(prompt, resampled.tokens)
        assert max(abs(a - b) for a, b in zip(rescored, resampled.logprobs, strict=True)) < 1e-4
        assert policy.reference_logprobs(prompt, completion.tokens) == pytest.approx(
            reference, abs=1e-5
        )
    finally:
        with torch.no_grad():
            for p in lora_b:
                p.zero_()


def test_max_tokens_bounds_an_unfinished_call(policy: LocalPolicy) -> None:
    prompt = policy.renderer.render_prompt([Message(role="user", content="Task: read a.py")])
    completion = policy.sample(prompt, SampleParams(max_tokens=6))
    assert len(completion.tokens) == 6
    assert len(completion.logprobs) == 6
    with pytest.raises(ValueError):
        policy.renderer.parse_call(completion.text)


def test_next_turn_after_a_tool_result(policy: LocalPolicy) -> None:
    first = ToolCall(tool="glob", arguments={"pat": "**/*.py"})
    messages = [
        Message(role="user", content="Task: fix the failing test"),
        *policy.renderer.turn_messages(
            first, ToolResult(ok=True, output="src/calc/ops.py\ntests/test_ops.py")
        ),
    ]
    prompt = policy.renderer.render_prompt(messages)
    completion = policy.sample(prompt, SampleParams(max_tokens=160))
    call = policy.renderer.parse_call(completion.text)
    assert call.tool in TOOL_NAMES


def test_render_call_scores_as_a_demonstration(
    policy: LocalPolicy, samples: list[tuple[list[int], Completion]]
) -> None:
    # Training scores the renderer's tokens of a call (e.g. the reviewer's edit) after the
    # prompt: they must be scorable, one finite logprob per token.
    prompt, _ = samples[0]
    demo = policy.renderer.render_call(ToolCall(tool="read", arguments={"path": "tests/a.py"}))
    scored = policy.logprobs(prompt, demo)
    assert len(scored) == len(demo)
    assert all(float("-inf") < lp <= 0.0 for lp in scored)
    assert policy.logprobs(prompt, []) == []


def test_prompt_cache_reuses_the_shared_prefix_exactly(policy: LocalPolicy) -> None:
    policy.prompt_cache.clear()
    first = [Message(role="user", content="Task: show me README.md")]
    prompt = policy.renderer.render_prompt(first)
    cold = policy.sample(prompt, SampleParams(max_tokens=160))
    hits, reused = policy.prompt_cache.hits, policy.prompt_cache.reused_tokens
    warm = policy.sample(prompt, SampleParams(max_tokens=160))
    assert policy.prompt_cache.hits == hits + 1
    assert policy.prompt_cache.reused_tokens == reused + len(prompt) - 1
    assert warm.tokens == cold.tokens
    assert warm.logprobs == pytest.approx(cold.logprobs, abs=1e-4)
    # The next turn shares the system prompt and the first turn.
    call = policy.renderer.parse_call(warm.text)
    longer = policy.renderer.render_prompt(
        [*first, *policy.renderer.turn_messages(call, ToolResult(ok=True, output="# calc"))]
    )
    following = policy.sample(longer, SampleParams(max_tokens=160))
    assert policy.prompt_cache.reused_tokens > reused + 2 * (len(prompt) - 10)
    scored = policy.logprobs(longer, following.tokens)
    assert max(abs(a - b) for a, b in zip(scored, following.logprobs, strict=True)) < 1e-4


def test_one_call_stores_its_prompt_once_decoding_is_done(policy: LocalPolicy) -> None:
    """An entry stored at the prefill is a second copy of the prompt's K/V, held beside
    the decode's growing cache for the whole call: the entry comes after the last step.
    (The prompt's shared start may be there before, read back from disk.)"""
    policy.prompt_cache.clear()
    prompt = policy.renderer.render_prompt([Message(role="user", content="Task: show me a.py")])
    held_at_forward: list[list[int]] = []
    hook = policy.model.register_forward_pre_hook(
        lambda *_: held_at_forward.append([len(e[0]) for e in policy.prompt_cache.entries])
    )
    try:
        cold = policy.sample(prompt, SampleParams(max_tokens=60))
    finally:
        hook.remove()
    assert len(held_at_forward) > 2
    assert all(held in ([], [len(policy._prefix)]) for held in held_at_forward)
    assert [len(e[0]) for e in policy.prompt_cache.entries] == [len(prompt)]
    warm = policy.sample(prompt, SampleParams(max_tokens=60))  # from the stored entry
    assert policy.prompt_cache.hits and warm.tokens == cold.tokens


def test_allowed_tools_restrict_the_call(policy: LocalPolicy) -> None:
    prompt = policy.renderer.render_prompt([Message(role="user", content="Task: run pytest")])
    for tools in (["grep"], ["read", "glob"]):
        completion = policy.sample(prompt, SampleParams(max_tokens=160, tools=tools))
        assert policy.renderer.parse_call(completion.text).tool in tools
    with pytest.raises(ValueError, match="unknown tools"):
        policy.sample(prompt, SampleParams(tools=["rm"]))


def test_grammars_are_kept_newest_first_and_bounded(policy: LocalPolicy) -> None:
    """A workspace's file list is part of a grammar's key, so every created file makes a
    new one: the compiled grammars stay at MAX_GRAMMARS, the one in use is not rebuilt."""
    from continual_lsp.policy.base import DecodeRestrictions
    from continual_lsp.policy.local.local_policy import MAX_GRAMMARS

    lists = [DecodeRestrictions(files=[f"f{i}.py"]) for i in range(MAX_GRAMMARS + 5)]
    first = policy.grammar_for(None, lists[0])
    for forbid in lists[1:]:
        policy.grammar_for(None, forbid)
    assert policy.grammar_for(None, lists[-1]) is policy.grammar_for(None, lists[-1])
    assert len(policy.host.grammars) == MAX_GRAMMARS
    assert policy.grammar_for(None, lists[0]) is not first  # the oldest was dropped
