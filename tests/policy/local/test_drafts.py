"""Prompt-lookup drafts on the real model: every decode path gives the call it gives
without them, in fewer forward passes, when the call copies from its prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from continual_lsp.config import Settings
from continual_lsp.policy.base import Completion, Message, SampleParams
from continual_lsp.policy.local.candidate_tree import constrained_decode_batch
from continual_lsp.policy.local.decode import constrained_decode
from continual_lsp.policy.local.local_policy import LocalPolicy
from continual_lsp.policy.local.model_host import ModelHost
from continual_lsp.tools import ToolCall, ToolRunner
from tests.policy.local.support import user_on

pytestmark = pytest.mark.model

PARAMS = SampleParams(temperature=0.0, max_tokens=96, tools=["edit", "edit_lines", "write"])


def _file_turn(policy: LocalPolicy, workspace: Path) -> list[int]:
    """The task, then ops.py read: an edit copies its path and lines from the prompt."""
    (workspace / "ops.py").write_text(
        "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
    )
    runner = ToolRunner(workspace, Settings(sandbox="none", allow_unsandboxed=True))
    read = ToolCall(tool="read", arguments={"path": "ops.py"})
    return policy.renderer.render_prompt(
        [
            Message(role="user", content="Task: add returns a - b; make it return a + b"),
            *policy.renderer.turn_messages(read, runner.execute(read)),
        ]
    )


class Passes:
    """Counts forward passes (each embeds its fed tokens once)."""

    def __init__(self, model: Any) -> None:
        self.count = 0
        embed = model.get_base_model().model.embed_tokens
        embed.register_forward_hook(lambda *_: self.tick())

    def tick(self) -> None:
        self.count += 1


def _same(got: Completion, want: Completion) -> None:
    assert got.tokens == want.tokens
    assert got.forced == want.forced
    assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs, strict=True)) < 1e-4


def test_one_call_and_a_tree_are_unchanged_in_fewer_passes(
    model_and_tokenizer: tuple[Any, Any], tmp_path: Path
) -> None:
    policy = LocalPolicy(Settings(), model_and_tokenizer)
    prompt = _file_turn(policy, tmp_path)
    grammar = policy.grammar_for(PARAMS.tools)
    passes = Passes(policy.model)
    with policy.exclusive(), policy._skip_zero_adapter():
        plain = constrained_decode(policy.model, grammar, prompt, PARAMS)
        plain_passes, passes.count = passes.count, 0
        drafted = constrained_decode(policy.model, grammar, prompt, PARAMS, draft=8)
        drafted_passes, passes.count = passes.count, 0
        greedy = PARAMS.model_copy(update={"greedy_rows": 2})
        tree = constrained_decode_batch(policy.model, grammar, prompt, greedy, 2, draft=8)
        tree_passes = passes.count
    assert '"path":"ops.py"' in plain.text  # the base model (no starter) names the file
    _same(drafted, plain)
    for row in tree:
        _same(row, plain)
    assert drafted_passes < plain_passes
    assert tree_passes < plain_passes


def test_rows_on_the_scheduler_are_unchanged_in_fewer_steps(
    model_and_tokenizer: tuple[Any, Any], tmp_path: Path
) -> None:
    host = ModelHost.private(Settings(), model_and_tokenizer)
    assert host.enable_batching()
    user = user_on(host, "u0", seed=None)
    prompt = _file_turn(user, tmp_path)
    grammar = user.grammar_for(PARAMS.tools)
    with user.exclusive(), user._skip_zero_adapter():
        plain = constrained_decode(user.model, grammar, prompt, PARAMS)
    got = user.sample(prompt, PARAMS)  # Settings().draft_tokens: on by default
    assert host.scheduler is not None
    _same(got, plain)
    assert host.scheduler.steps < len(plain.tokens) - plain.forced
