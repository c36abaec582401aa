"""A Policy that proposes a fixed list of calls: the real Agent, without a model.

The server tests that check protocol behaviour (errors, commands, TCP auth) use it so
they run in seconds; the model-backed tests cover the same paths with SmolLM2.
"""

from __future__ import annotations

import json
from typing import Any

from continual_lsp.policy.base import (
    AdapterInfo,
    Completion,
    Datum,
    Message,
    SampleParams,
    TrainMetrics,
)
from continual_lsp.tools.base import ToolCall


class ScriptedRenderer:
    def tokenize(self, text: str) -> list[int]:
        return list(range(max(1, len(text) // 4)))

    def render_prompt(self, messages: list[Message]) -> list[int]:
        return [1, 2, 3]

    def render_call(self, call: ToolCall) -> list[int]:
        return [4, 5]

    def parse_call(self, text: str) -> ToolCall:
        data = json.loads(text)
        return ToolCall(tool=data["tool"], arguments=data["arguments"])


class ScriptedPolicy:
    backend = "scripted"
    model_name = "scripted"

    def __init__(self, calls: list[dict[str, Any]]) -> None:
        self.calls = calls
        self.index = 0
        self._renderer = ScriptedRenderer()

    @property
    def renderer(self) -> ScriptedRenderer:
        return self._renderer

    @property
    def adapter_version(self) -> str | None:
        return None

    def sample(self, prompt_tokens: list[int], params: SampleParams) -> Completion:
        call = self.calls[min(self.index, len(self.calls) - 1)]
        self.index += 1
        return Completion(tokens=[7, 8, 9], logprobs=[-0.1, -0.2, -0.3], text=json.dumps(call))

    def logprobs(self, prompt_tokens: list[int], completion_tokens: list[int]) -> list[float]:
        return [-0.5] * len(completion_tokens)

    def train_step(self, batch: list[Datum], loss: Any, lr: float, **options: Any) -> TrainMetrics:
        return TrainMetrics(loss=0.0)

    def save_adapter(self, name: str) -> AdapterInfo:
        return AdapterInfo(name=name, path="", sha256="")

    def load_adapter(self, name: str) -> None:
        return None


# The sample workspace's bug: integer division in mean().
FIX_MEAN = {
    "tool": "edit_lines",
    "arguments": {
        "path": "src/calc/ops.py",
        "start": 7,
        "end": 7,
        "content": "    return sum(values) / len(values)\n",
    },
}
WRONG_TEST = {
    "tool": "edit_lines",
    "arguments": {
        "path": "tests/test_ops.py",
        "start": 9,
        "end": 9,
        "content": "    assert mean([1, 2]) == 1\n",
    },
}
ADD_DOCSTRING = {
    "tool": "edit",
    "arguments": {
        "path": "src/calc/ops.py",
        "old": "def add(a, b):\n",
        "new": 'def add(a, b):\n    """Sum of a and b."""\n',
    },
}
RUN_TESTS = {"tool": "bash", "arguments": {"cmd": "echo tests-ran"}}

SCRIPTS: dict[str, list[dict[str, Any]]] = {
    # approve → deny (retry) → edit → bash → repeat (task ends)
    "flow": [FIX_MEAN, WRONG_TEST, ADD_DOCSTRING, RUN_TESTS, RUN_TESTS],
    "bash": [RUN_TESTS, RUN_TESTS],
}
