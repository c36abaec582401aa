"""The agent's errors: what it cannot do, in words for the reviewer."""

from __future__ import annotations

from continual_lsp.errors import ReviewerError
from continual_lsp.tools.base import ToolError


class AgentError(ReviewerError):
    """A request the agent cannot carry out; the message is meant for the reviewer."""


class Unparsable(ToolError):
    """A change that would leave a file that parsed not parsing (`tools.checks`)."""

    def __init__(self, message: str, problem: str) -> None:
        super().__init__(message)
        self.problem = problem
