"""A short, fixed situation for SDPO tests: one task, a denied call, a demonstration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from continual_lsp.config import Settings
from continual_lsp.policy.base import Completion, Message, SampleParams
from continual_lsp.policy.local.local_policy import LocalPolicy
from continual_lsp.policy.render import ChatMLRenderer
from continual_lsp.tools.base import ToolCall

SYSTEM = "Reply with exactly one JSON tool call."
TASK = "In src/calc/ops.py line 3 returns a - b; make it return a + b."
DEMO = ToolCall(
    tool="edit_lines",
    arguments={"path": "src/calc/ops.py", "start": 3, "end": 3, "content": "    return a + b"},
)
CORRECTION = "Do not rewrite the whole file; change only line 3 with edit_lines."


@dataclass
class Situation:
    prompt: list[int]
    denied: list[int]
    denied_logprobs: list[float]
    demo: list[int]


_GREEDY: dict[tuple[int, ...], Completion] = {}


def make_situation(policy: Any) -> Situation:
    """The denied call is the base model's own greedy proposal (what a reviewer denies).

    SDPO's advantage compares teacher and student on a *sample of the student*: a
    hand-written call the student would never write has low student logprobs everywhere,
    and every token looks "better" to the teacher. The greedy sample is computed once per
    session (fresh LocalPolicy = base weights, so it is the same for every test).
    """
    prompt = ChatMLRenderer(policy.tokenizer, system_prompt=SYSTEM).render_prompt(
        [Message(role="user", content=TASK)]
    )
    key = tuple(prompt)
    if key not in _GREEDY:
        assert policy.adapter_version is None
        _GREEDY[key] = policy.sample(prompt, SampleParams(temperature=0.0, max_tokens=60))
    denied = _GREEDY[key]
    assert denied.tokens != policy.renderer.render_call(DEMO)
    return Situation(prompt, denied.tokens, denied.logprobs, policy.renderer.render_call(DEMO))


@pytest.fixture
def policy(model_and_tokenizer: tuple[Any, Any], tmp_path: Any) -> LocalPolicy:
    return LocalPolicy(Settings(adapters_dir=str(tmp_path / "adapters")), model_and_tokenizer)
