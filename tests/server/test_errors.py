"""How agent exceptions reach the editor: a sentence for the reviewer, never a crash."""

from __future__ import annotations

from pydantic import BaseModel
from pygls.exceptions import JsonRpcInternalError, JsonRpcInvalidParams

from continual_lsp.agent.errors import AgentError
from continual_lsp.errors import ReviewerError
from continual_lsp.policy.base import BackendUnavailable
from continual_lsp.server.errors import RequestFailed, agent_error, validate
from continual_lsp.store import StoreError
from continual_lsp.tools.base import ToolError


def test_reviewer_errors_are_request_failed_with_their_message() -> None:
    down = agent_error(BackendUnavailable("cannot reach the Tinker service at https://x"))
    assert isinstance(down, RequestFailed) and down.code == -32803
    assert "cannot reach the Tinker service" in down.message
    assert isinstance(agent_error(AgentError("unknown proposal 'p9'")), RequestFailed)
    assert isinstance(agent_error(FileNotFoundError("no such file: a.py")), RequestFailed)


def test_every_reviewer_error_is_one_kind_of_error() -> None:
    """The server knows one base class, not a list of names: a reviewer error added in a
    lower layer reaches the editor as its message without the server changing."""

    class StaleLease(ReviewerError):
        pass

    for error in (StaleLease("the lease expired"), StoreError("x"), ToolError("y")):
        assert isinstance(agent_error(error), RequestFailed)
    assert issubclass(BackendUnavailable, RuntimeError)  # callers that catch it as one


def test_a_bug_is_an_internal_error_that_names_it() -> None:
    error = agent_error(KeyError("tokens"))
    assert isinstance(error, JsonRpcInternalError) and not isinstance(error, RequestFailed)
    assert error.message == "KeyError: 'tokens'"


def test_validate_names_the_method_and_the_field() -> None:
    class Params(BaseModel):
        proposalId: str

    assert validate(Params, "continual/decide", {"proposalId": "p1"}).proposalId == "p1"
    for bad, detail in [({}, "proposalId: Field required"), ([1], "expected an object")]:
        try:
            validate(Params, "continual/decide", bad)
        except JsonRpcInvalidParams as exc:
            assert exc.message.startswith("invalid params for continual/decide: ")
            assert detail in exc.message
        else:
            raise AssertionError(f"{bad!r} was accepted")
