"""A local stand-in for a vLLM server with `--enable-lora` and run-time adapter loading.

It speaks the endpoints `VllmPolicy` uses, validates every request body against pydantic
models written from vLLM's own protocol (`CompletionRequest`, `LoadLoRAAdapterRequest`,
`UnloadLoRAAdapterRequest`; unknown fields are refused here, so a misspelt field fails a
test instead of being ignored as a real server would), and answers the way vLLM does:
errors as `{"error": {"message", "type", "code"}}`, adapter loads as plain text, a route
that is off as FastAPI's `{"detail": "Not Found"}`.

Its "model" is arithmetic: the log-prob of token t at position i under weights w is
`-(0.5 + 0.001·i + 0.0001·(t mod 97)) - shift(w)`, with shift 0 for the base and a
per-adapter-path shift otherwise, so a request scored under the wrong adapter or at an
off-by-one position shows. Under the grammar it returns 0 for every sampled token (as
vLLM's masked log-probs do for forced tokens): a backend that used those would fail.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from continual_lsp.policy.render import call_text
from continual_lsp.tools.base import ToolCall


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StructuredOutputs(_Strict):
    json_schema: dict[str, Any] | None = Field(default=None, alias="json")
    regex: str | None = None
    grammar: str | None = None
    disable_any_whitespace: bool = False


class CompletionRequest(_Strict):
    """vLLM's /v1/completions body, the fields a client of this project may send."""

    model: str
    prompt: list[int] | list[list[int]]
    max_tokens: int = Field(16, ge=1)
    n: int = Field(1, ge=1)
    temperature: float | None = Field(None, ge=0)
    seed: int | None = None
    logprobs: int | None = Field(None, ge=0)
    prompt_logprobs: int | None = Field(None, ge=0)
    stop_token_ids: list[int] | None = None
    stop: list[str] | None = None
    skip_special_tokens: bool = True
    return_token_ids: bool | None = None
    return_tokens_as_token_ids: bool | None = None
    structured_outputs: StructuredOutputs | None = None
    guided_json: dict[str, Any] | None = None
    cache_salt: str | None = Field(None, min_length=1, max_length=1024)


class LoadLoRAAdapterRequest(_Strict):
    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)


class UnloadLoRAAdapterRequest(_Strict):
    lora_name: str = Field(min_length=1)


def fake_logprob(position: int, token: int, shift: float) -> float:
    return -(0.5 + 0.001 * position + 0.0001 * (token % 97)) - shift


def adapter_shift(path: str) -> float:
    return 0.01 + int(hashlib.sha256(path.encode()).hexdigest()[:4], 16) / 1e6


class FakeVllm:
    """The server's state and behaviour; `serve()` puts it on a loopback port."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        base: str = "base-model",
        max_model_len: int = 4096,
        end_of_turn: int,
        proposals: dict[str, ToolCall] | None = None,
        old_server: bool = False,
        check_paths: bool = True,
    ) -> None:
        """`proposals`: the call each weights propose (key: adapter path, "" the base);
        `old_server`: no `token_ids` and no stop token in the output (vLLM before 0.10)."""
        self.tokenizer = tokenizer
        self.base = base
        self.max_model_len = max_model_len
        self.end_of_turn = end_of_turn
        self.proposals = proposals or {}
        self.old_server = old_server
        self.check_paths = check_paths
        self.runtime_lora = True
        self.loras: dict[str, str] = {}  # name -> path
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.fail_next: int | None = None
        self.lock = threading.Lock()

    # -- the "model" -------------------------------------------------------------------

    def weights(self, model: str) -> str:
        return "" if model == self.base else self.loras[model]

    def shift(self, model: str) -> float:
        weights = self.weights(model)
        return 0.0 if not weights else adapter_shift(weights)

    def proposal_tokens(self, model: str) -> tuple[ToolCall, list[int]]:
        call = self.proposals.get(self.weights(model)) or ToolCall(
            tool="read", arguments={"path": "README.md"}
        )
        return call, list(self.tokenizer.encode(call_text(call), add_special_tokens=False))

    def expected_logprobs(self, model: str, prompt: list[int], tokens: list[int]) -> list[float]:
        """What a correct client reports for `tokens` after `prompt` under `model`."""
        shift = self.shift(model)
        return [fake_logprob(len(prompt) + i, t, shift) for i, t in enumerate(tokens)]

    # -- endpoints -------------------------------------------------------------------------

    def handle(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        with self.lock:
            self.requests.append((path, body or {}))
            if self.fail_next is not None:
                status, self.fail_next = self.fail_next, None
                return status, _error(f"injected failure {status}", status)
            if method == "GET" and path == "/v1/models":
                cards = [{"id": self.base, "max_model_len": self.max_model_len}]
                cards += [{"id": n, "root": p, "parent": self.base} for n, p in self.loras.items()]
                return 200, {"object": "list", "data": cards}
            if (
                path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter")
                and not self.runtime_lora
            ):
                return 404, {"detail": "Not Found"}
            if method == "POST" and path == "/v1/load_lora_adapter":
                return self._load(LoadLoRAAdapterRequest.model_validate(body))
            if method == "POST" and path == "/v1/unload_lora_adapter":
                request = UnloadLoRAAdapterRequest.model_validate(body)
                if request.lora_name not in self.loras:
                    return 404, _error(f"The lora adapter '{request.lora_name}' cannot be found.")
                del self.loras[request.lora_name]
                return 200, f"Success: LoRA adapter '{request.lora_name}' removed successfully."
            if method == "POST" and path == "/v1/completions":
                return self._complete(CompletionRequest.model_validate(body))
            return 404, {"detail": "Not Found"}

    def _load(self, request: LoadLoRAAdapterRequest) -> tuple[int, Any]:
        if request.lora_name in self.loras:
            return 400, _error(
                f"The lora adapter '{request.lora_name}' has already been loaded. If you "
                "want to load the adapter in place, set 'load_inplace' to True.",
                400,
            )
        if self.check_paths and not (Path(request.lora_path) / "adapter_config.json").is_file():
            return 404, _error(f"Loading lora {request.lora_name} failed: No adapter found")
        self.loras[request.lora_name] = request.lora_path
        return 200, f"Success: LoRA adapter '{request.lora_name}' added successfully."

    def _complete(self, request: CompletionRequest) -> tuple[int, Any]:
        if request.model != self.base and request.model not in self.loras:
            return 404, _error(f"The model `{request.model}` does not exist.")
        prompts = request.prompt if isinstance(request.prompt[0], list) else [request.prompt]
        vocab = len(self.tokenizer)
        if any(not 0 <= t < vocab for p in prompts for t in p):  # type: ignore[union-attr]
            return 400, _error("token id out of vocabulary", 400)
        if request.prompt_logprobs is not None:
            return 200, {
                "choices": [self._scores(request.model, p, i) for i, p in enumerate(prompts)]
            }  # type: ignore[arg-type]
        if len(prompts) != 1:
            return 400, _error("this fake samples one prompt at a time", 400)
        schema = (
            request.structured_outputs.json_schema
            if request.structured_outputs is not None
            else request.guided_json
        )
        call, tokens = self.proposal_tokens(request.model)
        if schema is not None:
            allowed = [b["properties"]["tool"]["const"] for b in schema["oneOf"]]
            if call.tool not in allowed:
                return 400, _error(f"the fake's {call.tool} call is outside the schema", 400)
        choices = [self._sample(i, tokens) for i in range(request.n)]
        return 200, {"object": "text_completion", "model": request.model, "choices": choices}

    def _sample(self, index: int, tokens: list[int]) -> dict[str, Any]:
        out = tokens if self.old_server else [*tokens, self.end_of_turn]
        choice: dict[str, Any] = {
            "index": index,
            "text": self.tokenizer.decode(tokens),
            "finish_reason": "stop",
            # Masked log-probs, as vLLM reports them under a grammar: not the policy's.
            "logprobs": {
                "tokens": [f"token_id:{t}" for t in out],
                "token_logprobs": [0.0] * len(out),
                "top_logprobs": None,
                "text_offset": [0] * len(out),
            },
        }
        if not self.old_server:
            choice["token_ids"] = out
        return choice

    def _scores(self, model: str, prompt: list[int], index: int) -> dict[str, Any]:
        shift = self.shift(model)
        entries: list[dict[str, Any] | None] = [None]
        for position, token in enumerate(prompt[1:], start=1):
            rival = (token + 1) % len(self.tokenizer)
            entries.append(
                {
                    # A rival token ranked first, so a client must look up the real one.
                    str(rival): {"logprob": -0.01, "rank": 1, "decoded_token": "x"},
                    str(token): {
                        "logprob": fake_logprob(position, token, shift),
                        "rank": 2,
                        "decoded_token": "y",
                    },
                }
            )
        return {"index": index, "text": "", "finish_reason": "length", "prompt_logprobs": entries}


def _error(message: str, code: int = 404) -> dict[str, Any]:
    kind: Literal["NotFoundError", "BadRequestError", "InternalServerError"] = (
        "NotFoundError"
        if code == 404
        else "BadRequestError"
        if code < 500
        else "InternalServerError"
    )
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def serve(fake: FakeVllm) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Start `fake` on a loopback port in a daemon thread: (server, base url)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            try:
                status, payload = fake.handle(method, self.path, body)
            except ValueError as exc:  # pydantic's ValidationError: vLLM answers 400
                status, payload = 400, _error(str(exc), 400)
            text = isinstance(payload, str)
            data = (payload if text else json.dumps(payload)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if text else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
