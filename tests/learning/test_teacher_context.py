"""SDPO's teacher context on the real embedded model's chat template."""

from __future__ import annotations

import pytest

from continual_lsp.learning.teacher_context import feedback_text, teacher_prompt
from continual_lsp.policy.local.local_policy import LocalPolicy

from .conftest import CORRECTION, make_situation

pytestmark = pytest.mark.model


def test_teacher_context_has_the_fix_and_never_the_denied_call(policy: LocalPolicy) -> None:
    s = make_situation(policy)
    demo_text = policy.tokenizer.decode(s.demo[:-1])
    t = teacher_prompt(policy, s.prompt, feedback_text(CORRECTION, demo_text))
    header = policy.tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    assert t[: len(s.prompt) - len(header)] == s.prompt[: -len(header)]  # shares the KV prefix
    assert t[-len(header) :] == header
    text = policy.tokenizer.decode(t[len(s.prompt) - len(header) :])
    assert CORRECTION in text and demo_text in text
    assert policy.tokenizer.decode(s.denied[:-1]) not in policy.tokenizer.decode(t)
    assert text.startswith("<|im_start|>user\n")
