"""VllmPolicy: sampling and scoring on a vLLM server with multi-LoRA (docs/deploy.md).

Selected by `backend = "vllm"`. One vLLM process serves the base model for every user;
each user's current adapter version is loaded into it at run time and named per request
(`model=<lora name>`). Only sampling and scoring happen here: the training worker trains
on `vllm_trainer` (`policy.make_trainer`), and a version it saves reaches vLLM when the
agent serves it (`AdapterRegistry.serve` → `load_adapter`).

Spoken with the standard library's HTTP client (bodies: `vllm_wire`): `GET /v1/models`
(the base model is served; its `max_model_len`), `POST /v1/load_lora_adapter` and
`/v1/unload_lora_adapter` (needs `--enable-lora`, `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`),
`POST /v1/completions` with token-id prompts under `structured_outputs.json` = the schema
the local backend decodes under (`grammar.decoding_schema`: allow-list and guards).

**Prompts are the trainer's.** The worker builds SDPO's teacher prompts and
demonstrations with its own renderer, so the sampler renders as its trainer does: the
local backend's canonical JSON call (`ChatMLRenderer`, decoded under the schema), or with
`vllm_trainer = "tinker"` the model's native tool-call format (`make_tinker_renderer`),
sampled without a grammar as Tinker samples, the guards checking every call.

**Log-probs.** vLLM masks the logits with the grammar before it computes the sampled
tokens' log-probs, so a forced token comes back at 0 and the others are renormalised over
what the grammar allowed. SDPO needs the policy's own log-probs (what `logprobs()` returns,
and what the local backend records), so every sample is rescored in one unconstrained
request (`prompt_logprobs` over prompt + completion, all candidates batched): the numbers
in a `Completion` are exactly what `logprobs()` gives for the same tokens.

**Failure.** An unreachable server, a timeout, a 5xx or 429, or a rejected key raise
`BackendUnavailable` (the caller keeps the decision queued). A server restarted since an
adapter was loaded answers 404 for its name: the adapter is loaded again and the request
retried once.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from continual_lsp.config import Settings
from continual_lsp.policy.adapter_registry import adapters_dir
from continual_lsp.policy.base import (
    BackendUnavailable,
    BackendVersion,
    Completion,
    SampleParams,
)
from continual_lsp.policy.call_schema import decoding_schema
from continual_lsp.policy.model_files import load_tokenizer
from continual_lsp.policy.render import ChatMLRenderer
from continual_lsp.policy.tinker.tinker_policy import TinkerPolicy
from continual_lsp.policy.tinker.tinker_render import TinkerRenderer, make_tinker_renderer
from continual_lsp.policy.vllm.vllm_wire import (
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    ModelList,
    VllmRequestError,
    completion_scores,
    error_text,
    lora_name,
)

log = logging.getLogger(__name__)

DEFAULT_CONTEXT = 8192  # when /v1/models does not say (older servers)


# -- the policy -----------------------------------------------------------------------------------


class VllmPolicy(BackendVersion):
    """Implements `policy.base.Sampler` on vLLM: it samples and scores, and has no training
    verbs; the worker trains on `vllm_trainer` (`policy.make_trainer`)."""

    backend: str = "vllm"

    def __init__(
        self,
        *,
        url: str,
        served_model: str,
        tokenizer: Any,
        user: str,
        adapters_dir: str | Path,
        path_map: dict[str, str] | None = None,
        manages_versions: bool = False,
        export: Callable[[str], Path] | None = None,
        renderer: TinkerRenderer | None = None,
        allowed_tools: list[str] | None = None,
        timeout_s: float = 60.0,
        legacy_guided: bool = False,
        api_key: str | None = None,
    ) -> None:
        """`export(version)`: a PEFT directory for a version the trainer keeps remotely
        (Tinker); needed when `manages_versions`. `renderer`: the trainer's when it is not
        the local backend's (then no grammar); None: `ChatMLRenderer` on `tokenizer`."""
        if manages_versions and export is None:
            raise ValueError("a trainer that keeps its versions needs an export to PEFT files")
        self.url = url.rstrip("/")
        self.model_name = served_model
        self.user = user
        self.adapters_dir = Path(adapters_dir).expanduser()
        # Longest prefix first, so a nested mount wins over its parent.
        self.path_map = sorted(
            ((Path(k).expanduser(), v) for k, v in (path_map or {}).items()),
            key=lambda kv: len(kv[0].parts),
            reverse=True,
        )
        self.manages_versions = manages_versions
        self.export = export
        self.timeout_s = timeout_s
        self.legacy_guided = legacy_guided
        self.api_key = api_key if api_key is not None else os.environ.get("VLLM_API_KEY") or None
        self._tokenizer = tokenizer
        self._grammar = renderer is None
        self._renderer: ChatMLRenderer | TinkerRenderer = renderer or ChatMLRenderer(
            tokenizer, tools=allowed_tools
        )
        self._context: int | None = None
        self._lora: tuple[str, str] | None = None  # (name on the server, path it reads)
        self._lock = threading.RLock()  # adapter switches against requests naming it
        # vLLM's prefix cache is shared: unsalted, one user could time whether another's
        # prompt (their code) is cached. A secret salt per policy keeps each user's own.
        self._salt = secrets.token_urlsafe(32)

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> VllmPolicy:
        """Build from `Settings`: the tokenizer from the local copy of `model`."""
        kwargs: dict[str, Any] = {
            "url": settings.vllm_url,
            "served_model": settings.vllm_model or settings.model,
            "user": settings.user,
            "adapters_dir": adapters_dir(settings),
            "path_map": settings.vllm_path_map,
            "allowed_tools": settings.allowed_tools,
            "timeout_s": settings.vllm_timeout_s,
            "legacy_guided": settings.vllm_legacy_guided,
        }
        kwargs.update(overrides)
        if "tokenizer" not in kwargs:
            kwargs["tokenizer"] = load_tokenizer(settings.model)
        if settings.vllm_trainer == "tinker":
            kwargs.setdefault("manages_versions", True)
            kwargs.setdefault("export", _tinker_export(settings))
            kwargs.setdefault("renderer", make_tinker_renderer(settings.model, kwargs["tokenizer"]))
        return cls(**kwargs)

    # -- HTTP ------------------------------------------------------------------------------

    def _http(self, method: str, path: str, body: dict[str, Any] | None, what: str) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            message = error_text(exc.read())
            if exc.code in (401, 403):
                raise BackendUnavailable(
                    f"vLLM at {self.url} rejected the API key while {what}: check "
                    f"VLLM_API_KEY ({message})"
                ) from exc
            if exc.code == 429 or exc.code >= 500:
                raise BackendUnavailable(
                    f"vLLM at {self.url} is overloaded or failing while {what}: {message}"
                ) from exc
            raise VllmRequestError(exc.code, message) from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BackendUnavailable(
                f"cannot reach vLLM at {self.url} while {what}: {reason}"
            ) from exc

    def _complete(self, request: CompletionRequest, what: str) -> CompletionResponse:
        """POST /v1/completions; an adapter the server forgot (a restart) is loaded again.

        Any other refusal (a prompt over its context, a schema its grammar backend does not
        take) is a deployment problem the reviewer is told about, in vLLM's words.
        """
        body = request.model_copy(update={"cache_salt": self._salt}).model_dump(exclude_none=True)
        try:
            try:
                raw = self._http("POST", "/v1/completions", body, what)
            except VllmRequestError as exc:
                lora = self._lora
                if exc.status != 404 or lora is None or request.model != lora[0]:
                    raise
                log.info("vLLM lost adapter %s (restarted?); loading it again", lora[0])
                self._push(*lora)
                raw = self._http("POST", "/v1/completions", body, what)
        except VllmRequestError as exc:
            raise BackendUnavailable(f"vLLM refused the request while {what}: {exc}") from exc
        return CompletionResponse.model_validate_json(raw)

    def connect(self) -> None:
        """Check the base model is served and read its context length; idempotent."""
        if self._context is not None:
            return
        try:
            raw = self._http("GET", "/v1/models", None, "connecting")
        except VllmRequestError as exc:
            raise BackendUnavailable(
                f"vLLM at {self.url} refused to list its models: {exc}"
            ) from exc
        models = ModelList.model_validate_json(raw)
        card = next((m for m in models.data if m.id == self.model_name), None)
        if card is None:
            served = ", ".join(m.id for m in models.data) or "nothing"
            raise BackendUnavailable(
                f"vLLM at {self.url} serves {served}, not {self.model_name}: set vllm_model "
                "to its --served-model-name"
            )
        self._context = card.max_model_len or DEFAULT_CONTEXT

    # -- Sampler protocol: identity ---------------------------------------------------------

    @property
    def renderer(self) -> ChatMLRenderer | TinkerRenderer:
        return self._renderer

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def context_window(self) -> int:
        self.connect()
        assert self._context is not None
        return self._context

    def _served(self) -> str:
        """The name this policy's requests use: the current adapter's, else the base's."""
        return self._lora[0] if self._lora is not None else self.model_name

    # -- sampling and scoring --------------------------------------------------------------

    def logit_scorer(self) -> None:
        """Off-box: scores of given tokens only, no full distributions."""
        return None

    def sample(self, prompt_tokens: list[int], params: SampleParams) -> Completion:
        return self.sample_batch(prompt_tokens, params, 1)[0]

    def sample_batch(
        self, prompt_tokens: list[int], params: SampleParams, n: int
    ) -> list[Completion]:
        """`n` completions under the tool-call schema, rescored without it (module doc).

        The first `params.greedy_rows` rows are the greedy completion (one greedy request;
        greedy rows are identical), the rest one request of `n - greedy_rows` samples.
        """
        if n < 1:
            raise ValueError(f"need at least one candidate, asked for {n}")
        self.connect()
        start = time.perf_counter()
        greedy_rows = n if params.temperature <= 0 else min(params.greedy_rows, n)
        with self._lock:
            rows: list[list[int]] = []
            if greedy_rows:
                greedy = self._generate(prompt_tokens, params, 1, 0.0)
                rows += greedy * greedy_rows
            if n > greedy_rows:
                rows += self._generate(prompt_tokens, params, n - greedy_rows, params.temperature)
            scores = self._score(prompt_tokens, rows, self._served(), "scoring the samples")
        seconds = time.perf_counter() - start
        return [
            Completion(
                tokens=tokens,
                logprobs=logprobs,
                text=self._renderer.decode(tokens),
                seconds=seconds,
            )
            for tokens, logprobs in zip(rows, scores, strict=True)
        ]

    def _generate(
        self, prompt_tokens: list[int], params: SampleParams, n: int, temperature: float
    ) -> list[list[int]]:
        schema = decoding_schema(params.tools, params.forbid) if self._grammar else None
        stops = [self._renderer.end_of_turn_id] if self._grammar else self._renderer.stop()
        request = CompletionRequest(
            model=self._served(),
            prompt=list(prompt_tokens),
            max_tokens=params.max_tokens,
            n=n,
            temperature=temperature,
            seed=params.seed,
            # Token ids come back as `token_ids`; older servers only name them in the
            # logprobs (`token_id:N`), so ask for those too.
            logprobs=0,
            return_token_ids=True,
            return_tokens_as_token_ids=True,
            stop_token_ids=[t for t in stops if isinstance(t, int)] or None,
            stop=[t for t in stops if isinstance(t, str)] or None,
            structured_outputs=None
            if schema is None or self.legacy_guided
            else {"json": schema, "disable_any_whitespace": True},
            guided_json=schema if self.legacy_guided else None,
        )
        response = self._complete(request, "sampling")
        if len(response.choices) != n:
            raise BackendUnavailable(f"vLLM returned {len(response.choices)} samples for {n}")
        return [self._tokens(choice) for choice in sorted(response.choices, key=lambda c: c.index)]

    def _tokens(self, choice: CompletionChoice) -> list[int]:
        """The sampled ids, ending with the end-of-turn token when the call was finished
        (servers differ on whether the stop token is returned; `render_call` ends so)."""
        tokens = choice.sampled_ids()
        end = getattr(self._renderer, "end_of_turn_id", None)
        if choice.finish_reason == "stop" and end is not None and (not tokens or tokens[-1] != end):
            tokens.append(end)
        return tokens

    def _score(
        self, prompt_tokens: list[int], completions: list[list[int]], model: str, what: str
    ) -> list[list[float]]:
        """Log-probs of each completion under `model`, no grammar: one batched request."""
        if not prompt_tokens:
            raise ValueError("logprobs needs a non-empty prompt")
        wanted = [i for i, c in enumerate(completions) if c]
        out: list[list[float]] = [[] for _ in completions]
        if not wanted:
            return out
        request = CompletionRequest(
            model=model,
            prompt=[[*prompt_tokens, *completions[i]] for i in wanted],
            max_tokens=1,  # the scores are of the prompt; one token is the least to ask
            prompt_logprobs=1,
        )
        response = self._complete(request, what)
        if len(response.choices) != len(wanted):
            raise BackendUnavailable(f"vLLM scored {len(response.choices)} of {len(wanted)}")
        for choice in response.choices:
            i = wanted[choice.index]
            if choice.prompt_logprobs is None:
                raise BackendUnavailable("vLLM returned no prompt_logprobs: upgrade vLLM")
            out[i] = completion_scores(choice.prompt_logprobs, len(prompt_tokens), completions[i])
        return out

    def logprobs(self, prompt_tokens: list[int], completion_tokens: list[int]) -> list[float]:
        return self.logprobs_batch(prompt_tokens, [completion_tokens])[0]

    def logprobs_batch(
        self, prompt_tokens: list[int], completions: list[list[int]]
    ) -> list[list[float]]:
        with self._lock:
            return self._score(prompt_tokens, completions, self._served(), "scoring")

    def reference_logprobs(
        self, prompt_tokens: list[int], completion_tokens: list[int]
    ) -> list[float]:
        """The base model's scores (no adapter): the drift reference."""
        return self._score(
            prompt_tokens, [completion_tokens], self.model_name, "scoring the reference"
        )[0]

    # -- adapters --------------------------------------------------------------------------

    def _remote_path(self, local: Path) -> str:
        """Where the vLLM host reads `local` (`vllm_path_map`, else the same path)."""
        local = local.resolve()
        for prefix, remote in self.path_map:
            if local.is_relative_to(prefix.resolve()):
                return str(Path(remote) / local.relative_to(prefix.resolve()))
        return str(local)

    def _push(self, name: str, remote_path: str) -> None:
        """Load an adapter into the server; already there under this name is fine."""
        try:
            self._http(
                "POST",
                "/v1/load_lora_adapter",
                {"lora_name": name, "lora_path": remote_path},
                "loading the adapter",
            )
        except VllmRequestError as exc:
            if exc.status == 400 and "already been loaded" in exc.message:
                return
            if exc.status in (404, 405) and exc.message in ("Not Found", "Method Not Allowed"):
                raise BackendUnavailable(
                    f"vLLM at {self.url} does not load adapters at run time: start it with "
                    "--enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"
                ) from exc
            raise BackendUnavailable(
                f"vLLM could not load adapter {remote_path}: {exc.message}"
            ) from exc

    def _drop(self, name: str) -> None:
        """Unload a version this policy no longer serves (best effort: vLLM evicts too)."""
        try:
            self._http(
                "POST", "/v1/unload_lora_adapter", {"lora_name": name}, "unloading the adapter"
            )
        except (VllmRequestError, BackendUnavailable) as exc:
            log.info("could not unload adapter %s: %s", name, exc)

    def load_adapter(self, name: str) -> None:
        """Serve version `name` (a path, or a version inside `adapters_dir`; a trainer's
        version name when it keeps them) on vLLM; `""`: the base weights."""
        with self._lock:
            previous = self._lora
            if not name:
                self._lora, self._adapter_version = None, None
            else:
                if self.manages_versions:
                    assert self.export is not None
                    path = self.export(name)
                else:
                    path = Path(name).expanduser()
                    if not path.is_absolute() and not path.exists():
                        path = self.adapters_dir / name
                if not path.is_dir():
                    raise FileNotFoundError(f"no adapter directory at {path}")
                lora = (lora_name(self.user, path), self._remote_path(path))
                self._push(*lora)
                self._lora, self._adapter_version = lora, Path(name).name
            if previous is not None and previous != self._lora:
                self._drop(previous[0])


def _tinker_export(settings: Settings) -> Callable[[str], Path]:
    """Versions trained on Tinker, fetched once as PEFT directories vLLM can read."""
    target_root = adapters_dir(settings) / "vllm-export"
    trainer: list[Any] = []  # built on first export: a sampling-only process never connects

    def export(version: str) -> Path:
        target = target_root / version
        if target.is_dir():
            return target
        if not trainer:
            trainer.append(TinkerPolicy.from_settings(settings))
        return Path(trainer[0].download_adapter(version, target))

    return export
