"""The seven tools (read, write, edit, edit_lines, glob, grep, bash), `done` (the task's
end, with the model's summary) and their sandbox.

The agent needs only `ToolRunner` and `sandbox_status`; the lanes run generated guard
code with `run_sandboxed`.
"""

from continual_lsp.tools.base import (
    ARG_MODELS,
    FILE_CHANGING_TOOLS,
    READ_ONLY_TOOLS,
    TOOL_NAMES,
    PathEscapeError,
    Preview,
    StaleProposalError,
    ToolCall,
    ToolError,
    ToolResult,
    tool_call_schema,
    tool_schema,
)
from continual_lsp.tools.bash import run_bash
from continual_lsp.tools.jail import display, resolve
from continual_lsp.tools.runner import ToolRunner, sha256_of
from continual_lsp.tools.sandbox import SandboxResult, run_sandboxed, sandbox_status

__all__ = [
    "ARG_MODELS",
    "FILE_CHANGING_TOOLS",
    "READ_ONLY_TOOLS",
    "TOOL_NAMES",
    "PathEscapeError",
    "Preview",
    "SandboxResult",
    "StaleProposalError",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "ToolRunner",
    "display",
    "resolve",
    "run_bash",
    "run_sandboxed",
    "sandbox_status",
    "sha256_of",
    "tool_call_schema",
    "tool_schema",
]
