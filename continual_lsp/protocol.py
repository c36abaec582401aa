"""Wire payloads of DESIGN §7, defined once. camelCase on the wire, snake_case in Python.

Editors, bots and tests depend on these names: extend, never rename.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, models_json_schema
from pydantic_core import core_schema


class Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Position(Wire):
    line: int
    character: int


class Range(Wire):
    start: Position
    end: Position


# -- client → server requests -----------------------------------------------------------------


MAX_START_FILES = 4


class StartTaskParams(Wire):
    text: str = Field(min_length=1, max_length=10_000)
    # Files the task starts with in view (the editor's current file, say): each is read
    # into the conversation before the first proposal, so the model need not hunt for it.
    # Workspace-relative or absolute paths inside the workspace.
    files: list[str] = Field(default_factory=list, max_length=MAX_START_FILES)


class StartTaskResult(Wire):
    task_id: str
    # The first proposal, also sent as `continual/proposal`: a client that processes the
    # response before (or without) the notification still has it.
    proposal: ProposalNotification | None = None


# "override": run a call a guard blocks (only such a proposal takes it; approve refuses
# one); it counts against the guard, and a guard overridden twice retires to CONTEXT.
Decision = Literal["approve", "deny", "edit", "override"]


class HunkDecision(Wire):
    """The reviewer's verdict on one hunk of a file proposal (`Hunk.index`)."""

    index: int = Field(ge=0)
    accept: bool
    reason: str | None = Field(default=None, max_length=10_000)


class DecideParams(Wire):
    """With `hunks`, the decision follows from them: every hunk accepted is an approve,
    none a deny (their reasons are the correction), some an edit whose editedArguments
    hold the accepted hunks and whose correction is the rejected hunks' reasons."""

    proposal_id: str = Field(min_length=1)
    decision: Decision
    correction: str | None = Field(default=None, max_length=10_000)
    edited_arguments: dict[str, Any] | None = None
    hunks: list[HunkDecision] | None = Field(default=None, min_length=1)


class Learned(Wire):
    step: int
    loss: float
    seconds: float


class DecideResult(Wire):
    ok: bool
    learned: Learned | None = None
    next_proposal_id: str | None = None
    next_proposal: ProposalNotification | None = None


class NoteParams(Wire):
    text: str = Field(min_length=1, max_length=10_000)


class OkResult(Wire):
    ok: bool


class LedgerParams(Wire):
    pass


Lane = Literal["CODE", "WEIGHTS", "CONTEXT", "NONE"]


class GateCompliance(Wire):
    """A WEIGHTS item's held-out compliance (mean log-prob margin of the compliant over
    the violating call) under the incumbent adapter and under its consolidation."""

    before: float
    after: float
    promoted: bool


class LedgerItem(Wire):
    id: str
    text: str
    lane: Lane
    reason: str
    recurrence: int
    created_at: float
    active: bool
    # Proof that a lesson took: times the item acted (guard block or rewrite, allow-rule
    # approval, cue match) and corrections of its cluster made after it existed.
    fired: int | None = None
    recurred_after: int | None = None
    gate: GateCompliance | None = None
    # An allow rule: the approved proposals it was learned from.
    approvals: list[str] | None = None
    # A guard: times the reviewer ran a call it blocked ("Override guard").
    overridden: int | None = None
    # A correction about one change only: kept with its task, no standing rule until the
    # reviewer promotes it.
    task_scoped: bool | None = None


class LedgerResult(Wire):
    items: list[LedgerItem]
    context_tokens: int
    notes_only_tokens: int


class RevertParams(Wire):
    item_id: str = Field(min_length=1)


class PromoteParams(Wire):
    """Make a task-scoped correction (`LedgerItem.taskScoped`) a standing one: routed again
    through the lanes, it may become a guard, a bullet or a WEIGHTS item."""

    item_id: str = Field(min_length=1)


class PromoteResult(Wire):
    ok: bool
    item_id: str  # the standing item it became
    lane: Lane
    reason: str


# Cumulative: "read_only" auto-approves read, glob and grep; "allow_rules" also runs
# calls an allow rule covers; "workspace_edits" also file changes inside the workspace.
# "manual" asks for everything.
Autonomy = Literal["manual", "read_only", "allow_rules", "workspace_edits"]


class StatusParams(Wire):
    pass


class StatusResult(Wire):
    backend: str
    model: str
    adapter_version: str | None = None
    training_steps: int
    queue_depth: int
    pending_proposal_id: str | None = None
    # The starter adapter merged into the base (`starter-<sha256 prefix>`), None when off.
    starter: str | None = None
    # What runs without a prompt (`Autonomy`); a deny rule or a guard always wins.
    autonomy: Autonomy | None = None


class PendingParams(Wire):
    pass


class PendingResult(Wire):
    """What waits for the reviewer in this session: a resync after a reconnect or a lost
    notification."""

    proposals: list[ProposalNotification]


class UndoParams(Wire):
    """Undo an applied change (the latest when no id): a late denial; `reason` is its
    correction."""

    proposal_id: str | None = Field(default=None, min_length=1)
    reason: str | None = Field(default=None, max_length=10_000)


class UndoResult(Wire):
    ok: bool
    proposal_id: str
    restored: list[str]  # workspace-relative paths put back as they were before the change


class AllowParams(Wire):
    """ "Always allow calls like this one" (the proposal's command prefix or path class)."""

    proposal_id: str = Field(min_length=1)


class AllowResult(Wire):
    ok: bool
    item_id: str
    rule: str  # what the rule allows, in words (`bash: pytest -q …`)


# -- server → client notifications -------------------------------------------------------------


class Hunk(Wire):
    """One contiguous change of a file proposal, numbered from 0; lines 1-based as in a
    unified diff header (`oldLines` 0: a pure insertion after `oldStart - 1`)."""

    index: int
    old_start: int
    old_lines: int
    new_start: int
    new_lines: int


class AllowOffer(Wire):
    """The reviewer approved calls of this class before: offer "always allow"."""

    rule: str
    approvals: int


class ProposalNotification(Wire):
    proposal_id: str
    task_id: str
    tool: str
    arguments: dict[str, Any]
    read_only: bool
    uri: str | None = None
    range: Range | None = None
    diff: str | None = None
    # Extensions (DESIGN: extend, don't rename): why a guard rewrote the call, a warning
    # when bash would run without the OS sandbox, and the adapter that sampled the call.
    note: str | None = None
    adapter_version: str | None = None
    # A file proposal with more than one hunk can be decided hunk by hunk.
    hunks: list[Hunk] | None = None
    allow_offer: AllowOffer | None = None
    # The guard's reason when a guard blocks the call: only Edit, Deny or override
    # (`decision: "override"`) can pass it; approve is refused.
    blocked_by: str | None = None
    # What a file change was verified for before it was shown: "parses", "the failing
    # test passes with this change", or "does not parse: <error>" when no candidate did.
    checked: str | None = None


class LearnedNotification(Wire):
    proposal_id: str
    step: int
    loss: float
    adapter_version: str | None = None
    seconds: float


class RoutedNotification(Wire):
    item_id: str
    lane: Lane
    reason: str


class TaskDoneNotification(Wire):
    task_id: str
    summary: str


METHOD_START_TASK = "continual/startTask"
METHOD_DECIDE = "continual/decide"
METHOD_NOTE = "continual/note"
METHOD_LEDGER = "continual/ledger"
METHOD_REVERT = "continual/revert"
METHOD_STATUS = "continual/status"
METHOD_PENDING = "continual/pending"
METHOD_UNDO = "continual/undo"
METHOD_ALLOW = "continual/allow"
METHOD_PROMOTE = "continual/promote"
NOTIFY_PROPOSAL = "continual/proposal"
NOTIFY_LEARNED = "continual/learned"
NOTIFY_ROUTED = "continual/routed"
NOTIFY_TASK_DONE = "continual/taskDone"


class _WireSchema(GenerateJsonSchema):
    """The payloads as `Wire.dump` writes them: an unset field is absent, never null."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        out = super().default_schema(schema)
        if "default" in out and out["default"] is None:
            del out["default"]
        return out

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False  # a title would become a type of its own in generated code


def json_schema() -> dict[str, Any]:
    """JSON Schema of every wire payload (under `$defs`, by wire name), from which
    `vscode-client/src/core/wire.ts` is generated (`bash scripts/protocol.sh`)."""
    models = [
        value
        for value in globals().values()
        if isinstance(value, type) and issubclass(value, Wire) and value is not Wire
    ]
    _, schema = models_json_schema(
        [(model, "serialization") for model in models],
        by_alias=True,
        title="Wire",
        description="Every payload of the continual/* methods, one definition each.",
        schema_generator=_WireSchema,
    )
    return schema
