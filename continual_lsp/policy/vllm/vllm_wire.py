"""vLLM's OpenAI-compatible HTTP API, the part `VllmPolicy` speaks (vllm_policy.py).

Field names and answers as vLLM's own protocol has them (`CompletionRequest`,
`CompletionResponse`, `ModelList`, its error body). Requests are built from these models;
answers are read through them, ignoring fields this client does not use.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from continual_lsp.policy.base import BackendUnavailable

_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


class _Wire(BaseModel):
    # vLLM adds fields release by release; what we read is declared, the rest ignored.
    model_config = ConfigDict(extra="ignore")


class CompletionRequest(BaseModel):
    """The subset of vLLM's `CompletionRequest` this backend sends."""

    model: str
    prompt: list[int] | list[list[int]]
    max_tokens: int
    n: int = 1
    temperature: float = 0.0
    seed: int | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    stop_token_ids: list[int] | None = None
    stop: list[str] | None = None
    skip_special_tokens: bool = False
    return_token_ids: bool | None = None
    return_tokens_as_token_ids: bool | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_json: dict[str, Any] | None = None
    cache_salt: str | None = None


class PromptLogprob(_Wire):
    logprob: float


class CompletionLogprobs(_Wire):
    tokens: list[str] = []


class CompletionChoice(_Wire):
    index: int
    text: str = ""
    token_ids: list[int] | None = None
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    # One entry per prompt token (the first None); keys are token ids as strings.
    prompt_logprobs: list[dict[str, PromptLogprob] | None] | None = None

    def sampled_ids(self) -> list[int]:
        """The sampled token ids: `token_ids`, or on servers without it the logprobs'
        tokens written as `token_id:N` (`return_tokens_as_token_ids`)."""
        if self.token_ids is not None:
            return list(self.token_ids)
        if self.logprobs is None:
            raise BackendUnavailable("vLLM returned neither token ids nor logprobs")
        matches = [_TOKEN_ID.match(t) for t in self.logprobs.tokens]
        if not all(matches):
            raise BackendUnavailable("vLLM returned tokens without ids: upgrade vLLM")
        return [int(m.group(1)) for m in matches if m is not None]


class CompletionResponse(_Wire):
    choices: list[CompletionChoice]


class ModelCard(_Wire):
    id: str
    max_model_len: int | None = None


class ModelList(_Wire):
    data: list[ModelCard]


class VllmRequestError(RuntimeError):
    """vLLM refused a request as malformed or naming something it does not have (4xx)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"vLLM answered {status}: {message}")
        self.status = status
        self.message = message


def error_text(raw: bytes) -> str:
    """The message of a vLLM error body (`{"error": {"message"}}`, or the older flat form)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace").strip()
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and "message" in inner:
            return str(inner["message"])
        for key in ("message", "detail"):  # the older flat form; FastAPI's own 404
            if key in body:
                return str(body[key])
    return str(body)


def completion_scores(
    entries: list[dict[str, PromptLogprob] | None], prompt_len: int, tokens: list[int]
) -> list[float]:
    """The completion's slice of `prompt_logprobs` over prompt + completion.

    Entry i is log p(token i | tokens < i), so the completion is entries `[P, P+T)`, each
    looked up by the token actually there (vLLM adds it beside the top-k).
    """
    if len(entries) != prompt_len + len(tokens):
        raise BackendUnavailable(
            f"vLLM returned {len(entries)} prompt log-probs for {prompt_len} + {len(tokens)} tokens"
        )
    out = []
    for entry, token in zip(entries[prompt_len:], tokens, strict=True):
        if entry is None or str(token) not in entry:
            raise BackendUnavailable(f"vLLM returned no log-prob for completion token {token}")
        out.append(entry[str(token)].logprob)
    return out


def lora_name(user: str, path: Path) -> str:
    """The adapter's name on the shared server: unique per user and version file.

    One vLLM serves many users, so the version name alone (`v0003`) would collide; the
    hash of the absolute path keeps two stores of one user name apart.
    """
    safe_user = re.sub(r"[^A-Za-z0-9_.-]", "_", user)[:40]
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:10]
    return f"cl-{safe_user}-{path.name}-{digest}"
