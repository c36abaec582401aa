"""The policy protocol: the same verbs on every backend, so SDPO is written once.

Token ids and float lists cross this boundary, never backend types (torch tensors,
tinker futures), except through `LogitScorer`, which only a backend holding the weights
in this process offers. See DESIGN §3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, Unpack, runtime_checkable

from pydantic import BaseModel, Field

from continual_lsp.errors import ReviewerError
from continual_lsp.tools.base import ToolCall

if TYPE_CHECKING:
    import torch


class BackendUnavailable(ReviewerError, RuntimeError):
    """A remote backend cannot be used right now; `str(exc)` is shown to the reviewer.

    Raised for a missing or rejected key, an unreachable or overloaded service, and any
    wait that passes its deadline. Nothing is lost: the decision's training job stays
    queued and runs when the service is back.
    """


class Message(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str


class DecodeRestrictions(BaseModel):
    """Calls the grammar never writes: the guards that a grammar can express, and paths
    that name no file.

    `path_prefixes[tool]`: path prefixes `tool` may not touch ("" = the tool at all);
    `command_prefixes`: bash commands never to start; `files`: the only paths the tools
    that need an existing file (FILE_PATH_TOOLS) may name (None: any path);
    `write_paths`: the only paths `write` may name, a folder ("src/pkg/") standing for
    any file under it (None: any). Narrowing only: a guard and the tools still check
    every sampled call, so a backend without a grammar may ignore this.
    """

    path_prefixes: dict[str, list[str]] = Field(default_factory=dict)
    command_prefixes: list[str] = Field(default_factory=list)
    files: list[str] | None = None
    write_paths: list[str] | None = None

    def key(self) -> str:
        return self.model_dump_json()


class SampleParams(BaseModel):
    temperature: float = 0.0  # 0 = greedy
    max_tokens: int = 256
    seed: int | None = None
    # Restrict the grammar to these tools (None = every tool and done): a per-task or per-user
    # allow-list, like other agents' "allowed tools" setting.
    tools: list[str] | None = None
    # Guards expressed as grammar restrictions (local backend; Tinker samples without a
    # grammar and leaves them to the guards).
    forbid: DecodeRestrictions | None = None
    # `sample_batch` only: this many first rows decode greedily, so the candidates always
    # include the model's best guess (Tinker samples every row at `temperature`).
    greedy_rows: int = 0


class Completion(BaseModel):
    tokens: list[int]  # every completion token, grammar-forced ones included
    logprobs: list[float]  # sampling policy's logprob of each token in `tokens`
    text: str
    forced: int = 0  # how many of `tokens` the grammar forced (not decoded one by one)
    seconds: float = 0.0


class Datum(BaseModel):
    """One training example: a prompt, the completion being scored, per-token signals.

    `advantages` and `old_logprobs` align with `completion_tokens`. For cross-entropy
    the advantages are ignored (weights of 1). `teacher_topk` is local-only: for each
    completion position, the teacher's top-k token ids and logprobs (full-logit mode).
    `loss_weights` (local-only) scale each position's loss term, not its KL term: SDPO's
    full-logit mode sets 0 where the grammar forced the token, so distilling the teacher's
    raw distribution does not retrain the JSON framing the sampler never chooses.
    `rehearsal` (local-only): a call the step keeps likely (a starter anchor,
    `learning/anchors.py`), not one the reviewer judged: its prompt's K/V is not kept in
    the step's few prefix-cache entries (no later step shares it) and it gets no KL term
    (its own loss already pulls towards the starter's call; the reference pass would
    double its cost).
    """

    prompt_tokens: list[int]
    completion_tokens: list[int]
    advantages: list[float] = Field(default_factory=list)
    old_logprobs: list[float] = Field(default_factory=list)
    teacher_topk_ids: list[list[int]] | None = None
    teacher_topk_logprobs: list[list[float]] | None = None
    loss_weights: list[float] | None = None
    rehearsal: bool = False


LossName = Literal["importance_sampling", "cross_entropy", "topk_distill"]


class TrainMetrics(BaseModel):
    loss: float
    kl: float = 0.0
    mean_advantage: float = 0.0
    mean_ratio: float = 1.0
    clipped_fraction: float = 0.0
    seconds: float = 0.0
    tokens: int = 0


class TrainOptions(TypedDict, total=False):
    """What `Policy.train_step` may be told besides the batch, the loss and the rate.

    Every backend names the options it honours in its signature, so one it does not know
    is a TypeError, never silently dropped.
    """

    kl_coef: float  # weight of the per-token KL to the base model
    clip_low: float  # importance-ratio clamp
    clip_high: float
    max_grad_norm: float | None  # None: no clipping
    alpha: float  # local: scale of the policy-gradient term
    prefix_cache: bool  # local: score the prompt once, without gradients


class AdapterInfo(BaseModel):
    name: str
    path: str
    sha256: str


@runtime_checkable
class Renderer(Protocol):
    """Turns messages + tool specs into prompt tokens and a completion into one call."""

    def render_prompt(self, messages: list[Message]) -> list[int]: ...

    def render_call(self, call: ToolCall) -> list[int]:
        """Tokens of `call` exactly as the model would write it (a demonstration)."""
        ...

    def parse_call(self, text: str) -> ToolCall:
        """Exactly one tool call, or ValueError with a clear message."""
        ...

    def tokenize(self, text: str) -> list[int]:
        """Tokens of plain text (what a context bullet costs per call)."""
        ...


# The weights a `LogitScorer` scores under: the trained adapter, its EMA teacher, or the
# frozen base model (the reference).
Weights = Literal["trained", "ema", "reference"]


@runtime_checkable
class LogitScorer(Protocol):
    """Full distributions where the weights live in this process (the local backend):
    what SDPO needs for grammar-masked advantages, top-k distillation, and the EMA and
    trust-region teachers. Off-box backends score given tokens only (`Sampler.logprobs`).
    """

    def log_distributions(
        self,
        prompt_tokens: list[int],
        completion_tokens: list[int],
        weights: Weights = "trained",
        *,
        for_step: bool = False,
    ) -> torch.Tensor:
        """`(T, V)` float32 log-softmax over the vocabulary at each completion position,
        under `weights`; the prompt's K/V is cached for the training step that follows.
        `for_step` (trained weights): the step that follows trains on this very prompt and
        completion, so the backend may keep the forward for it instead of running it again."""
        ...

    def grammar_masks(self, tokens: list[int]) -> list[torch.Tensor | None]:
        """The decoding grammar's allowed-token mask (bool, `(V,)`) at each position of
        `tokens`, replayed as the sampler decoded them; None where no mask applies."""
        ...

    def update_ema_teacher(self, rate: float) -> None:
        """θ_ema ← (1 − rate)·θ_ema + rate·θ (the EMA teacher made on first use)."""
        ...

    def warm_prefix(self, prompt_tokens: list[int]) -> None:
        """The prompt's K/V under the current weights, computed ahead of the next step."""
        ...


class BackendVersion:
    """`adapter_version` for a backend whose own `load_adapter` and `save_adapter` switch
    it with the weights (Tinker, vLLM): read-only to everyone else."""

    _adapter_version: str | None = None

    @property
    def adapter_version(self) -> str | None:
        return self._adapter_version


@runtime_checkable
class Sampler(Protocol):
    """Samples and scores calls under the adapter version it serves: what an agent needs.
    A backend that only samples (vLLM) implements this; training needs a `Policy`."""

    backend: str  # a name for logs and status; behaviour follows the capabilities below
    model_name: str
    # The backend names and keeps adapter versions itself (`save_adapter` returns its own
    # path, `load_adapter` takes that name, it checks them). Otherwise the caller writes
    # version files under its adapters folder and checks their sha256 before loading.
    manages_versions: bool

    @property
    def renderer(self) -> Renderer: ...

    @property
    def tokenizer(self) -> Any:
        """The base model's tokenizer (`encode`, `decode`, `apply_chat_template`): SDPO
        splices the teacher's turn into the student's prompt with it."""
        ...

    @property
    def adapter_version(self) -> str | None: ...

    def sample(self, prompt_tokens: list[int], params: SampleParams) -> Completion: ...

    def sample_batch(
        self, prompt_tokens: list[int], params: SampleParams, n: int
    ) -> list[Completion]:
        """`n` completions of one prompt in one batched request (the retry's candidates).

        Same contract per completion as `sample`; `params.seed` seeds the whole batch.
        """
        ...

    def logprobs(self, prompt_tokens: list[int], completion_tokens: list[int]) -> list[float]:
        """Current weights' logprob of each completion token given the prompt."""
        ...

    def reference_logprobs(
        self, prompt_tokens: list[int], completion_tokens: list[int]
    ) -> list[float]:
        """The same under the frozen base model (no adapter): the drift reference."""
        ...

    @property
    def context_window(self) -> int:
        """Tokens of prompt and completion together the model reads."""
        ...

    def logprobs_batch(
        self, prompt_tokens: list[int], completions: list[list[int]]
    ) -> list[list[float]]:
        """`logprobs` of several completions of one prompt in one request (a retry's
        candidates scored against the denied turn's prompt)."""
        ...

    def load_adapter(self, name: str) -> None: ...

    def logit_scorer(self) -> LogitScorer | None:
        """Full distributions, grammar masks, the EMA teacher and a warm training prefix
        when the weights live in this process; None off-box (Tinker, vLLM), where only
        `logprobs` / `reference_logprobs` of given tokens are at hand."""
        ...


@runtime_checkable
class Policy(Sampler, Protocol):
    """A `Sampler` that also trains its adapter and saves versions: what the training
    worker and the benches that train need (local, Tinker)."""

    def train_step(
        self, batch: list[Datum], loss: LossName, lr: float, **options: Unpack[TrainOptions]
    ) -> TrainMetrics: ...

    def save_adapter(self, name: str) -> AdapterInfo: ...
