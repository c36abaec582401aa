"""What the agent's rooms share, passed to each explicitly: the agent's parts (`Parts`),
its open tasks (`Task`) and the sampler, built on first use (`LazySampler`). The rooms
(`turns`, `decide`, `retry`, `recovery` …) are functions of these; the `Agent` holds
the lock around them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from continual_lsp.agent.checkpoints import Checkpoints
from continual_lsp.agent.conversation import Conversation
from continual_lsp.agent.landing import StepLanding
from continual_lsp.agent.lanes_facade import LanesFacade
from continual_lsp.agent.proposal import AgentListener
from continual_lsp.agent.training_jobs import TrainingJobs
from continual_lsp.config import Settings
from continual_lsp.policy.base import Sampler
from continual_lsp.policy.factory import make_policy
from continual_lsp.store import Store
from continual_lsp.tools.base import ToolCall
from continual_lsp.tools.runner import ToolRunner


class Task:
    """In-memory state of one open task; the store holds the durable record."""

    def __init__(self, task_id: str, text: str, conversation: Conversation) -> None:
        self.id = task_id
        self.text = text
        self.conversation = conversation
        self.turn = 0
        self.retries = 0
        self.invalid_streak = 0
        self.denied: list[str] = []  # proposal ids denied in the current turn
        self.executed: set[str] = set()  # canonical JSON of calls already run
        self.history: list[ToolCall] = []  # the calls run, oldest first (sequence guards)
        # (path, `calls.content_key`) of what each change run in this task replaced: a
        # call that puts it back is one that cannot run (`calls.preview`).
        self.replaced: set[tuple[str, str]] = set()
        self.pending: str | None = None
        self.done: str | None = None
        # The last run of a command that checks the task (`checks.is_check`), if it failed;
        # or the workspace's own tests, found failing where that run ran none
        # (`calls._tracked_check`).
        self.failing_check: str | None = None
        # The workspace files that failing run's output points at (`failures.named_files`).
        self.failing_files: list[str] = []
        # The files its output says are missing (`failures.missing_files`).
        self.missing_files: list[str] = []
        # Guards compiled from this task's denials: each must let the calls the reviewer
        # accepts next in the task through (`LanesFacade.let_through`).
        self.new_guards: list[str] = []


class LazySampler:
    """The agent's sampler: the one it was given, else the process's shared model, built
    when first asked for (a client connecting), not when the agent starts."""

    def __init__(self, settings: Settings, training: TrainingJobs, given: Sampler | None) -> None:
        self._settings = settings
        self._training = training
        self._sampler = given

    @property
    def built(self) -> Sampler | None:
        """The sampler if it exists yet (None: nothing has sampled)."""
        return self._sampler

    def get(self) -> Sampler:
        if self._sampler is None:
            # Every agent of this process samples from one copy of the model, each with
            # its own user's adapter copied in per call (issue 20: N users, one model).
            self._sampler = make_policy(self._settings, shared=True)
            self._training.sync_sampler(self._sampler)
            # The server builds the policy when a client connects: the worker starts then
            # too, so the first correction costs a step, not a model load.
            self._training.warm()
        return self._sampler

    def token_count(self, text: str) -> int:
        """Tokens of `text`: counted by the model's tokenizer once it is loaded, estimated
        before (the lanes budget their bullets with it; no model load for that)."""
        if self._sampler is None:
            return max(1, len(text) // 4)
        return len(self._sampler.renderer.tokenize(text))


@dataclass
class Parts:
    """The agent's parts, as data: every room gets this, none reaches back into `Agent`."""

    settings: Settings
    workspace: Path
    store: Store
    tools: ToolRunner
    lanes: LanesFacade
    training: TrainingJobs
    checkpoints: Checkpoints
    listener: AgentListener
    sampler: LazySampler
    landing: StepLanding
    tasks: dict[str, Task] = field(default_factory=dict)
    # What each proposal's change was checked for (`Proposal.checked`), by proposal id.
    checked: dict[str, str] = field(default_factory=dict)

    @property
    def policy(self) -> Sampler:
        return self.sampler.get()
