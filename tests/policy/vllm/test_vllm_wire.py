"""vLLM's answers as the backend reads them: the three error bodies vLLM and FastAPI
write, and the completion's slice of `prompt_logprobs`."""

from __future__ import annotations

import json

import pytest

from continual_lsp.policy.base import BackendUnavailable
from continual_lsp.policy.vllm.vllm_wire import PromptLogprob, completion_scores, error_text


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"error": {"message": "The model `x` does not exist.", "code": 404}}, "The model"),
        ({"object": "error", "message": "old flat form", "code": 400}, "old flat form"),
        ({"detail": "Not Found"}, "Not Found"),
    ],
)
def test_error_bodies(body: dict[str, object], message: str) -> None:
    assert error_text(json.dumps(body).encode()).startswith(message)


def test_plain_text_errors_are_kept() -> None:
    assert error_text(b"Internal Server Error\n") == "Internal Server Error"


def test_the_completion_is_looked_up_by_its_own_tokens() -> None:
    def entry(token: int, value: float) -> dict[str, PromptLogprob]:
        return {"0": PromptLogprob(logprob=-0.01), str(token): PromptLogprob(logprob=value)}

    entries = [None, entry(5, -1.0), entry(7, -2.0), entry(9, -3.0)]
    assert completion_scores(entries, 2, [7, 9]) == [-2.0, -3.0]
    with pytest.raises(BackendUnavailable, match="4 prompt log-probs for 2 \\+ 1 tokens"):
        completion_scores(entries, 2, [7])
    with pytest.raises(BackendUnavailable, match="no log-prob for completion token 8"):
        completion_scores(entries, 2, [7, 8])
