"""Settings: one typed model, filled from defaults, a TOML file, env vars and CLI flags."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from continual_lsp.protocol import Autonomy

EMBEDDED_MODEL = "embedded:SmolLM2-135M-Instruct"


def default_store_path(user: str = "default") -> Path:
    """Where `user`'s store lives when `store_path` is not set: the user data directory."""
    return Path(platformdirs.user_data_dir("continual-lsp")) / f"{user}.sqlite3"


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # policy
    # "local": transformers + peft in this process; "tinker": sampling and training on
    # Tinker (docs/tinker.md); "vllm": sampling and scoring on an OpenAI-compatible vLLM
    # server with multi-LoRA, training on `vllm_trainer` in the worker (docs/deploy.md).
    backend: Literal["local", "tinker", "vllm"] = "local"
    model: str = EMBEDDED_MODEL  # "embedded:…", an HF model directory, or a .gguf path
    device: str = "cpu"  # where the local backend runs the model ("cpu", "cuda")
    max_new_tokens: int = 192  # the longest call the model may write, in tokens
    temperature: float = 0.0  # of a turn's first sample (0: greedy)
    seed: int = 0  # of every sample, so a run can be replayed
    # Merge the shipped starter adapter (tool use, reading a correction; issue 13) into
    # the embedded model at load. Other models are loaded as they are.
    starter: bool = True
    # The precision the agent samples and scores in. "auto": on a CPU with native bf16
    # arithmetic (AVX512-BF16 or AMX), whichever of the two decodes faster, timed once
    # per CPU model and cached beside the model cache (bf16 was slower on one Xeon with
    # AMX, faster on an AMD EPYC); float32 on a CPU without it; bf16 on a CUDA GPU that
    # supports it. Mean |Δ log-prob| 0.01 per token. Training: `train_dtype`. A
    # TCP team server samples in float32 unless configured (shared_server_settings).
    sample_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    # backend = "vllm": where the server is and what it serves the base model as
    # (`--served-model-name`; None: `model`). `model` stays the local copy of the same
    # weights: its tokenizer renders prompts here and the local trainer trains on it.
    vllm_url: str = "http://127.0.0.1:8000"
    vllm_model: str | None = None  # the served model name (None: `model`)
    vllm_trainer: Literal["local", "tinker"] = "local"  # where a vLLM setup trains
    # Adapter paths as the vLLM host sees them, when the folder is mounted there under
    # another path: {local prefix: remote prefix}, for every user of a shared server
    # (env: "LOCAL=REMOTE"). Paths under no prefix are sent as they are.
    vllm_path_map: dict[str, str] = Field(default_factory=dict)
    vllm_timeout_s: float = Field(default=60.0, gt=0)  # one request to the vLLM server
    # Servers before vLLM 0.12 take `guided_json` instead of `structured_outputs`.
    vllm_legacy_guided: bool = False

    # learning
    enable_training: bool = True  # a denial or an edit runs an SDPO step
    lora_rank: int = 16  # of the user's adapter
    lora_targets: list[str] = Field(  # the modules the adapter wraps
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    # Chosen with bench/learning (docs/evidence.md): on the embedded model 5e-4 moved the
    # log-prob margins but flipped no held-out proposal in 5 corrections; 1e-3 flipped
    # 50-100% of them in all four scenarios with a quarter to a third of 3e-3's drift, and
    # 3e-3 overshot (logging fell back to 25% at 8 corrections). One step per correction.
    learning_rate: float = 1e-3
    # The precision of a training pass (bf16 autocast; the adapter and its optimizer stay
    # float32). "auto": as `sample_dtype`, timed once per CPU model for a training pass
    # (float32 on a CPU without native bf16, where autocast made a training pass 12x slower).
    train_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    # Also chosen with bench/learning (sdpo_token, lr 1e-3): against 0.05, 0.25 cut the
    # drift 7-23% from the 5th correction on at the same held-out compliance; 1.0 cut it
    # further but undid the behaviour (package manager 100% -> 0% at 8 corrections).
    kl_coef: float = 0.25
    # "token": the sampled-token surrogate; "topk": full-logit top-k plus the tail.
    loss_mode: Literal["token", "topk"] = "token"
    topk: int = 20  # the k of loss_mode "topk"
    # The SDPO teacher: the current adapter, an EMA of it (saved with each version,
    # restored on restart and revert), or the current one held in a trust region.
    teacher: Literal["current", "ema", "trust_region"] = "current"
    teacher_update_rate: float = 0.05  # how far the EMA teacher moves per step
    save_every: int = 1  # steps between saved adapter versions
    # The importance-sampling ratio clamp of a step (student over the sampler).
    is_clip_low: float = 0.5
    is_clip_high: float = 2.0  # (see is_clip_low)
    # More from each correction (issue 33; off until bench/learning measures them better,
    # docs/evidence.md): steps on one correction's datums (the IS clamp stops them), and
    # earlier corrections of the same cluster replayed with each new step.
    steps_per_correction: int = Field(default=1, ge=1, le=8)
    replay_same_cluster: int = Field(default=0, ge=0, le=8)  # (see steps_per_correction)
    # Calls of the starter's curriculum rehearsed in each step (learning/anchors.py), so a
    # run of lessons on one convention does not unlearn the agent's job; 0: none.
    # through_agent.py --forgetting (docs/evidence.md, one run each): 13 lessons cost 30
    # one-step agent-skill tasks of 36 with none, 8 with 2, 4 with 4; each costs a
    # prefill of its prompt in every step (bench/sdpo_step.py), so 2.
    anchors_per_step: int = Field(default=2, ge=0, le=8)
    # Each anchor token's advantage: 1 raises the starter's call as a demonstration would.
    # An anchor gets no KL term (Datum.rehearsal), so at 0 it does nothing but cost time:
    # anchors_per_step = 0 is the way to turn them off.
    anchor_advantage: float = Field(default=1.0, ge=0.0, le=4.0)
    # A step that raises the held-out anchors' loss by more than this (nats per token, over
    # the starter's) is undone; None: no gate.
    anchor_gate_nats: float | None = Field(default=0.1, gt=0.0)

    # agent
    # What runs without asking (cumulative): "manual" asks for everything, "read_only"
    # runs read, glob and grep, "allow_rules" also what an allow rule covers,
    # "workspace_edits" also file changes inside the workspace. Guards always run first.
    autonomy: Autonomy = "allow_rules"
    # Offer "always allow" once the reviewer approved this many calls of a class; learn
    # the rule by itself after `allow_learn_after` approvals (None: only when asked).
    allow_offer_after: int = Field(default=2, ge=1)
    allow_learn_after: int | None = Field(default=None, ge=2)  # (see allow_offer_after)
    allowed_tools: list[str] | None = None  # None = the seven tools and done
    # read / edit / edit_lines name one of the workspace's files (the ones glob and grep
    # see) when it has at most this many; 0: any path. A small model guesses a path that
    # looks right (`lib/x.py` for `svc/x.py`), and a read that fails teaches it nothing.
    decode_paths_limit: int = Field(default=2000, ge=0)
    max_retries: int = 3  # calls in a row that cannot run before a task stops
    # After a denial or a guard block: candidates sampled in one batch from the context
    # with the correction; the compliant one the correction lifts most is the retry.
    retry_candidates: int = Field(default=6, ge=1, le=32)
    # The candidates after the first (greedy) one. At 1.0 the 135M model wrote garbage
    # paths in about half of them (bench/learning/deny_to_retry.py, first run).
    retry_temperature: float = Field(default=0.8, gt=0.0)
    # And a greedy call of each tool ("use write") and then each path ("it goes in
    # src/pkg/units.py") the correction names that no candidate used, up to this many
    # in all (the 135M model samples one tool on one file six times over). 0: off.
    retry_probes: int = Field(default=2, ge=0, le=8)
    # A file change proposed while the task's last test run failed: this many candidates
    # (the model's call and warmer samples from its prompt, one batch) are tried on a
    # copy of the workspace, in the sandbox only (no reviewer approved them: with
    # sandbox = "none" nothing is tried), and one that turns the failing test green is
    # shown. 1: off.
    # Chosen with bench/propose.py (bench/results/propose_candidates.json): the N - 1
    # extra candidates decode in one batch, so N = 4 costs little more than N = 2 (p50
    # 3.9 vs 3.6 s a file-change turn, N = 1: 1.7 s, with drafts, on 2 quiet cores), for
    # three tries.
    file_candidates: int = Field(default=4, ge=1, le=32)
    # Local decoding: up to this many tokens copied from the prompt (a path, an edit's old
    # text) ride along with each decode step and are kept where the sampler agrees
    # (policy/local/speculate.py; the calls come out as without). 0: off.
    draft_tokens: int = Field(default=8, ge=0, le=32)
    # The time box of those test runs, all candidates of one turn together.
    check_timeout_s: float = Field(default=30.0, gt=0.0)
    max_turns: int = 30  # a task ends at this many turns

    # lanes
    weights_recurrence: int = (
        3  # a behavioural correction goes to WEIGHTS at this many in its cluster
    )
    cluster_threshold: float = 0.6  # cosine similarity that puts two corrections in one cluster
    consolidation_depth: int = 4  # WEIGHTS items queued before a consolidation runs
    # "xai": the detector and allocator also ask xAI (structured output); sends each
    # correction's text there (README, Privacy). Needs XAI_API_KEY; the key alone does
    # not turn it on.
    allocator: Literal["offline", "xai"] = "offline"
    xai_model: str = "grok-4-fast-non-reasoning"  # (allocator "xai")
    xai_host: str = "api.x.ai"  # (allocator "xai")
    xai_timeout_s: float = Field(default=20.0, gt=0)  # (allocator "xai")

    # tools / sandbox
    bash_timeout: int = 30  # seconds a bash call may run
    # rlimits of every process a bash call starts. Address space is off by default:
    # node, the JVM and Go reserve far more virtual memory than they use, so a cap that
    # stops a runaway allocation also breaks `npm test`. Set it where that is not a worry.
    bash_memory_limit_mb: int | None = Field(default=None, ge=16)
    bash_file_size_limit_mb: int = Field(default=1024, ge=1)  # the largest file a call may write
    bash_tmp_size_mb: int = Field(default=256, ge=1)  # the sandbox's private /tmp (RAM)
    bash_max_processes: int = Field(default=256, ge=8)  # a fork bomb meets this, not the timeout
    output_cap: int = 30_000  # characters of a tool's output kept
    sandbox: Literal["bwrap", "none"] = "bwrap"  # how bash runs ("none" needs allow_unsandboxed)
    allow_unsandboxed: bool = False  # the explicit consent sandbox "none" needs
    allow_network: bool = False  # bash may reach the network
    # Paths bash's sandbox covers with an empty tmpfs or /dev/null, besides the home
    # secrets. A shared TCP server fills it from its own configuration (tokens file,
    # every user's store and adapters, every workspace root; the user's own workspace
    # is bound back on top).
    sandbox_hidden_paths: list[str] = Field(default_factory=list)

    # store
    store_path: str | None = None  # default: the user's data directory
    adapters_dir: str | None = None  # default: beside the store
    user: str = "default"  # whose store and adapters these are

    # server
    # Directories a client's workspace must lie inside (empty = any directory the server
    # can open). Set it for a TCP server: a token holder otherwise picks any directory
    # this process can write to. Env: CONTINUAL_LSP_WORKSPACE_ROOTS, comma-separated.
    workspace_roots: list[str] = Field(default_factory=list)
    # The reviewer changing lines a proposal just wrote, within this many seconds, is
    # recorded as an edit signal for that proposal.
    manual_edit_window_s: float = 120.0

    # team server: one process, one base model, many users (issue 20)
    # Users with an open connection at once; one more is refused at initialize, with a
    # message saying so, before anything of theirs is touched.
    max_users: int = Field(default=32, ge=1)
    # Users' adapters kept in memory (~7 MB each at rank 16, the live one's included);
    # past it the least recently used are written to a temporary file and read back on
    # their next proposal: ~22 ms a swap against 0.6 s or more a proposal, so few stay
    # in memory; 20 users round-robin miss whatever the number. 2: the live user's and
    # the one before (at 4, the bench's 20-user server was 7 MB over its budget).
    max_resident_adapters: int = Field(default=2, ge=1)
    # Users' prompt K/V caches kept (~45 KB a token on the embedded model); past it the
    # least recently used is dropped and that user's next turn prefills in full. Each
    # user's system prompt is K/V of their own adapter, so a user without a cache pays
    # the whole prefill (~1.4 s on a 2-core EPYC against ~0.1 s after a hit): 8 users
    # asking at once on 4 caches missed in turn (p50 13.1 s; 5.1 s on 8: a probe of the
    # team bench's load, 2026-12-07).
    max_prompt_caches: int = Field(default=8, ge=1)
    # … and their bytes together (the user whose turn runs keeps theirs whatever its size:
    # it is that turn's working memory). An entry is a copy of its prompt's K/V only:
    # ~13 MB for a first proposal (~290 prompt tokens), growing with the conversation.
    # 128 MB: eight users' first turns (bench/team.py, docs/deploy.md).
    max_prompt_cache_mb: float = Field(default=128.0, gt=0)
    # The K/V of the prompt start every call shares (system prompt, tool schema), kept on
    # disk by the weights that made it (~12.6 MB each on the embedded model), so that a
    # fresh server does not prefill it again for a user whose weights it has seen:
    # ~1.4 s of a first proposal on a 2-core EPYC. Least recently used past this; 0: off.
    # 512: a 20-user team's two latest versions each (at 256, twenty users' entries
    # filled it, and a training worker's new ones pushed out users' current ones).
    prompt_prefix_disk_mb: float = Field(default=512.0, ge=0)
    # Prompt tokens one batched decode step may prefill (a shared host): a user's new
    # prompt is fed in pieces of at most this many tokens beside the others' decode
    # steps, so that no one's next token waits for a whole long prefill.
    batch_prefill_tokens: int = Field(default=256, ge=16)
    # Training jobs of one user that may wait; past it a correction is still committed and
    # its job queued, but the retry no longer waits for its step (the editor is told).
    max_queued_jobs: int = Field(default=4, ge=1)
    # One training worker process (one model) for every user of this server, taking their
    # jobs in turn, instead of a worker per user. Local backend; not with teacher "ema".
    # A TCP server turns it on unless the configuration names it (shared_server_settings).
    shared_training: bool = False

    @model_validator(mode="before")
    @classmethod
    def _old_auto_approve(cls, data: Any) -> Any:
        """Config files written before `autonomy` keep working: the old boolean maps onto
        it (true: reads run unasked, today's default, which also runs allow rules;
        false: ask for everything)."""
        if isinstance(data, dict) and "auto_approve_read_only" in data:
            data = dict(data)
            old = data.pop("auto_approve_read_only")
            if "autonomy" not in data and old in (False, "false", "0"):
                data["autonomy"] = "manual"
        return data

    @field_validator("vllm_path_map", mode="before")
    @classmethod
    def _path_map_from_text(cls, value: Any) -> Any:
        if not isinstance(value, str | list):
            return value
        pairs = value.split(",") if isinstance(value, str) else value
        try:
            return dict(pair.split("=", 1) for pair in (p.strip() for p in pairs) if pair)
        except ValueError as exc:
            raise ValueError("vllm_path_map takes LOCAL=REMOTE pairs, comma-separated") from exc

    @field_validator("workspace_roots", mode="before")
    @classmethod
    def _one_root_is_a_list(cls, value: Any) -> Any:
        # One root from the environment arrives as a plain string (no comma to split on).
        return (
            [part.strip() for part in value.split(",") if part.strip()]
            if isinstance(value, str)
            else value
        )

    def allows_workspace(self, workspace: Path) -> bool:
        """Whether `workspace` (symlinks resolved) lies inside one of `workspace_roots`."""
        if not self.workspace_roots:
            return True
        resolved = workspace.expanduser().resolve()
        return any(
            resolved.is_relative_to(Path(root).expanduser().resolve())
            for root in self.workspace_roots
        )

    def store_file(self) -> Path:
        """This user's store: `store_path`, else the default for `user`."""
        return Path(self.store_path) if self.store_path else default_store_path(self.user)

    @classmethod
    def load(cls, file: str | Path | None = None, **overrides: Any) -> Settings:
        """Defaults < TOML file < CONTINUAL_LSP_* env vars < explicit overrides."""
        data: dict[str, Any] = {}
        if file is not None:
            with open(file, "rb") as fh:
                data.update(tomllib.load(fh))
        for name, field in cls.model_fields.items():
            env = os.environ.get(f"CONTINUAL_LSP_{name.upper()}")
            if env is not None:
                data[name] = env if field.annotation is str else _coerce(env)
        data.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(data)


def _coerce(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if "," in text:
        return [part.strip() for part in text.split(",")]
    return text
