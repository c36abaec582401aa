"""The real embedded model, made to propose a fixed list of calls (teacher forcing).

Protocol tests (errors, commands, TCP auth, Neovim) need to know which call comes next.
Instead of a fake model, the real SmolLM2 policy scores each scripted call: the tokens
are exactly what the renderer writes for it and the logprobs are the model's own, so
every decision downstream (the store, the SDPO step, the adapters) sees real numbers.
Only the choice of call is scripted; the model-choice paths are covered by
test_lsp_model.py.
"""

from __future__ import annotations

from typing import Any

from continual_lsp.config import Settings
from continual_lsp.policy.base import Completion, SampleParams
from continual_lsp.policy.local.local_policy import LocalPolicy
from continual_lsp.tools.base import ToolCall


class ForcedCallPolicy(LocalPolicy):
    def __init__(
        self,
        settings: Settings,
        calls: list[dict[str, Any]],
        model_and_tokenizer: tuple[Any, Any] | None = None,
    ) -> None:
        super().__init__(settings, model_and_tokenizer)
        self.calls = calls
        self.index = 0

    def sample(self, prompt_tokens: list[int], params: SampleParams) -> Completion:
        call = ToolCall.model_validate(self.calls[min(self.index, len(self.calls) - 1)])
        self.index += 1
        tokens = self.renderer.render_call(call)
        return Completion(
            tokens=tokens,
            logprobs=self.logprobs(prompt_tokens, tokens),
            text=self.renderer.decode(tokens[:-1]),
            forced=len(tokens),
        )

    def sample_batch(
        self, prompt_tokens: list[int], params: SampleParams, n: int
    ) -> list[Completion]:
        """The next scripted call as every candidate: a chosen retry is still the script's.
        A batch whose grammar leaves out the scripted call's tool (a retry's tool probe)
        has nothing to give, and leaves the script where it is."""
        scripted = self.calls[min(self.index, len(self.calls) - 1)]["tool"]
        if params.tools is not None and scripted not in params.tools:
            return []
        return [self.sample(prompt_tokens, params)] * n


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
# The whole of ops.py rewritten (the fix and a reworded comment): not what was asked.
REWRITE_OPS = {
    "tool": "write",
    "arguments": {
        "path": "src/calc/ops.py",
        "content": "def add(a, b):\n    return a + b\n\n\ndef mean(values):\n"
        "    # the mean as a float\n    return sum(values) / len(values)\n",
    },
}
# A file no editor has open: approving it writes the disk directly.
WRITE_CHANGES = {
    "tool": "write",
    "arguments": {"path": "CHANGES.md", "content": "- mean() returns a float\n"},
}

# Two hunks: a docstring for add() (hunk 0) and the fix of mean() (hunk 1).
TWO_HUNKS = {
    "tool": "write",
    "arguments": {
        "path": "src/calc/ops.py",
        "content": 'def add(a, b):\n    """Sum of a and b."""\n    return a + b\n\n\n'
        "def mean(values):\n    # BUG: integer division truncates the mean\n"
        "    return sum(values) / len(values)\n",
    },
}
GIT_STATUS = {"tool": "bash", "arguments": {"cmd": "git status"}}
# The model's own end of a task (`done`), with its summary.
DONE = {
    "tool": "done",
    "arguments": {"summary": "mean() divides with / now, so mean([1, 2]) is 1.5."},
}
# The call a guard in the store blocks (tests/server/test_nvim.py): the script's favourite.
NPM_INSTALL = {"tool": "bash", "arguments": {"cmd": "npm install"}}

SCRIPTS: dict[str, list[dict[str, Any]]] = {
    # issue 19, three tasks. 1: hunks (accept one, reject one) → bash approved → a new
    # file (approved and undone later). 2: the same bash, "always allow" → another bash.
    # 3: the same bash runs unasked → the other bash is shown.
    "review": [TWO_HUNKS, GIT_STATUS, WRITE_CHANGES, GIT_STATUS, RUN_TESTS, GIT_STATUS, RUN_TESTS],
    # approve → deny (retry) → edit → bash → done (finish task)
    "flow": [FIX_MEAN, WRONG_TEST, ADD_DOCSTRING, RUN_TESTS, DONE],
    "bash": [RUN_TESTS, DONE],
    # Emacs: deny (retry) → approve by code action → approve a file not open → bash → done
    "emacs": [WRONG_TEST, FIX_MEAN, WRITE_CHANGES, RUN_TESTS, DONE],
    # a plain client: bash by showMessageRequest, then a file proposal
    "plain": [RUN_TESTS, FIX_MEAN],
    # every sample, every retry candidate: the one call a guard blocks
    "guarded": [NPM_INSTALL],
    # the fix a guard on src/calc/ blocks (sample and retry), overridden; then bash
    "override": [FIX_MEAN, FIX_MEAN, RUN_TESTS, RUN_TESTS],
    # issue 31: the whole file rewritten, denied with a task-scoped correction; the retry is
    # the one-line fix
    "scoped": [REWRITE_OPS, FIX_MEAN, RUN_TESTS, DONE],
    # bash a guard blocks (sample and retry), overridden; then done
    "blocked_bash": [RUN_TESTS, RUN_TESTS, DONE],
}

# The guard of the "override" script (seeded in the store by the tests).
CALC_GUARD = {
    "text": "Leave src/calc/ alone.",
    "lane": "CODE",
    "reason": "seeded by the test",
    "spec": {
        "message": "Leave src/calc/ alone.",
        "rules": [{"kind": "path", "globs": ["src/calc/**"]}],
    },
}
