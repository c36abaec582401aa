"""JSON-RPC errors the server answers with: a code a client can branch on, a message a
reviewer can read. Handlers raise these; pygls turns them into error responses."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams

from continual_lsp.errors import ReviewerError


class RequestFailed(JsonRpcException):
    """LSP's RequestFailed (-32803): valid params, but the request could not be carried
    out (unknown or already decided proposal, stale file, agent error)."""

    CODE = -32803
    MESSAGE = "Request failed"


def invalid_params(method: str, exc: ValidationError | str) -> JsonRpcInvalidParams:
    """InvalidParams naming the method and each bad field, e.g. `invalid params for
    continual/decide: decision: Input should be 'approve', 'deny', 'edit' or 'override'`."""
    if isinstance(exc, str):
        detail = exc
    else:
        parts = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ())) or "params"
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        detail = "; ".join(parts)
    return JsonRpcInvalidParams(message=f"invalid params for {method}: {detail}")


def validate(model: Any, method: str, params: Any) -> Any:
    """Validate raw JSON params with a pydantic wire model; InvalidParams on failure."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise invalid_params(method, f"expected an object, got {type(params).__name__}")
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise invalid_params(method, exc) from exc


def agent_error(exc: BaseException) -> JsonRpcException:
    """The JSON-RPC error for an exception out of an agent call.

    A reviewer-facing error (or a ValueError / OSError, which carry a readable message)
    is RequestFailed with its message; anything else is a bug, but the reviewer still
    gets a sentence (InternalError with the type and message), not a crash.
    """
    if isinstance(exc, ReviewerError | ValueError | OSError):
        return RequestFailed(str(exc))
    return JsonRpcInternalError(message=f"{type(exc).__name__}: {exc}")
