"""The tool-call contract: argument models, results, previews and errors.

Every tool's argument model is also the JSON schema used to prompt the model and to
constrain its decoding, so strings carry `max_length`: an unbounded string lets a
small model loop until the token budget runs out.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from continual_lsp.errors import ReviewerError

ToolName = Literal["read", "write", "edit", "edit_lines", "glob", "grep", "bash", "done"]
# `done` is the eighth answer: not a tool that acts but the model saying the task is
# finished, with its own summary; a proposal like any other (DESIGN §7).
TOOL_NAMES: tuple[ToolName, ...] = (
    "read",
    "write",
    "edit",
    "edit_lines",
    "glob",
    "grep",
    "bash",
    "done",
)
# The seven tools that act or look: every answer but `done`.
CALL_TOOLS: frozenset[str] = frozenset(TOOL_NAMES) - {"done"}
READ_ONLY_TOOLS: frozenset[str] = frozenset({"read", "glob", "grep"})
FILE_CHANGING_TOOLS: frozenset[str] = frozenset({"write", "edit", "edit_lines"})
# The tools whose `path` must name a file that exists (glob and grep take a folder too).
FILE_PATH_TOOLS: frozenset[str] = frozenset({"read", "edit", "edit_lines"})

# A path or a search pattern is one line: no control character (a small model writes a
# newline into `mod\npy`, a name no one means). The excluded characters are in the schema
# too, so the decoding grammar never writes them; the validator words the refusal for
# backends that decode without a grammar.
PATH_EXCLUDED = r"\x00-\x1f"
NEW_PATH_EXCLUDED = PATH_EXCLUDED + r"*?"


def _one_line(value: str) -> str:
    if any(ord(c) < 0x20 for c in value):
        raise ValueError(f"{value!r} has a newline or control character: write one line")
    return value


PathStr = Annotated[
    str,
    Field(min_length=1, max_length=200, json_schema_extra={"pattern": f"^[^{PATH_EXCLUDED}]+$"}),
    AfterValidator(_one_line),
]
PatternStr = PathStr  # a glob or grep pattern: the same one-line rule and bound
ContentStr = Annotated[str, Field(max_length=4000)]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadArgs(_Args):
    """Read a file; lines come back numbered."""

    path: PathStr
    offset: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    limit: Annotated[int, Field(ge=1, le=2000)] | None = None


# A new file's path: never a glob's `*` or `?`, which name no file anyone means (a small
# model copies `pkg/*.py` from the glob it ran) and which Windows refuses. In the schema,
# so the decoding grammar never writes one either.
def _not_a_glob(path: str) -> str:
    if "*" in path or "?" in path:
        raise ValueError(f"{path!r} is a glob pattern, not a file name: name one file")
    return path


NewPathStr = Annotated[
    str,
    Field(
        min_length=1, max_length=200, json_schema_extra={"pattern": f"^[^{NEW_PATH_EXCLUDED}]+$"}
    ),
    AfterValidator(_one_line),
    AfterValidator(_not_a_glob),
]


class WriteArgs(_Args):
    """Create or overwrite a whole file."""

    path: NewPathStr
    content: ContentStr


class EditArgs(_Args):
    """Replace `old` with `new`; `old` must occur once unless `all` is true."""

    path: PathStr
    old: Annotated[str, Field(min_length=1, max_length=2000)]
    new: Annotated[str, Field(max_length=2000)]
    all: bool | None = None


class EditLinesArgs(_Args):
    """Replace lines start..end (1-based, inclusive) with `content`."""

    path: PathStr
    start: Annotated[int, Field(ge=1, le=1_000_000)]
    end: Annotated[int, Field(ge=1, le=1_000_000)]
    content: ContentStr


class GlobArgs(_Args):
    """List files matching a glob pattern."""

    pat: PatternStr
    path: PathStr | None = None


class GrepArgs(_Args):
    """Search file contents with a regular expression."""

    pat: PatternStr
    path: PathStr | None = None


class BashArgs(_Args):
    """Run a shell command in the workspace."""

    cmd: Annotated[str, Field(min_length=1, max_length=1000)]
    timeout: Annotated[int, Field(ge=1, le=600)] | None = None


class DoneArgs(_Args):
    """Finish the task: one paragraph on what changed and why the task is done."""

    # One paragraph, bounded: the reviewer reads it in a code action's title or a
    # notification, and a small model given room writes on until max_tokens.
    summary: Annotated[
        str,
        Field(
            min_length=1, max_length=300, json_schema_extra={"pattern": f"^[^{PATH_EXCLUDED}]+$"}
        ),
        AfterValidator(_one_line),
    ]


ARG_MODELS: dict[str, type[_Args]] = {
    "read": ReadArgs,
    "write": WriteArgs,
    "edit": EditArgs,
    "edit_lines": EditLinesArgs,
    "glob": GlobArgs,
    "grep": GrepArgs,
    "bash": BashArgs,
    "done": DoneArgs,
}


class ToolCall(BaseModel):
    """Exactly one call of one tool; `arguments` validated against the tool's model."""

    model_config = ConfigDict(extra="forbid")

    tool: ToolName
    arguments: dict[str, Any]

    def parsed(self) -> _Args:
        return ARG_MODELS[self.tool].model_validate(self.arguments)

    @property
    def read_only(self) -> bool:
        return self.tool in READ_ONLY_TOOLS


class Preview(BaseModel):
    """What a file-changing call would do, computed without touching disk."""

    path: str  # relative to the workspace root, POSIX separators
    old_content: str | None  # None: the file does not exist yet
    new_content: str
    diff: str  # unified diff, a/ b/ prefixes
    old_sha256: str | None  # of the bytes on disk when the preview was computed
    changed_lines: tuple[int, int] | None = None  # 1-based inclusive range in the OLD file


class ToolResult(BaseModel):
    ok: bool
    output: str
    truncated: bool = False
    exit_code: int | None = None


class ToolError(ReviewerError):
    """A call that cannot run; the message is shown to the reviewer and the model."""


class OldTextNotFound(ToolError):
    """An edit's `old` text does not occur in the file."""


class RangePastEnd(ToolError):
    """An edit_lines range that runs past the end of the file (`lines` long)."""

    def __init__(self, message: str, lines: int) -> None:
        super().__init__(message)
        self.lines = lines


class PathEscapeError(ToolError):
    """A path resolves outside the workspace root."""


class StaleProposalError(ToolError):
    """The file changed on disk since the proposal was computed."""


def tool_schema(name: str) -> dict[str, Any]:
    """JSON schema of one tool's arguments (prompting and constrained decoding)."""
    return ARG_MODELS[name].model_json_schema()


def tool_call_schema() -> dict[str, Any]:
    """JSON schema of a whole call: a tool name, then that tool's argument schema."""
    return {
        "oneOf": [
            {
                "type": "object",
                "properties": {
                    "tool": {"const": name},
                    "arguments": tool_schema(name),
                },
                "required": ["tool", "arguments"],
                "additionalProperties": False,
            }
            for name in TOOL_NAMES
        ]
    }
