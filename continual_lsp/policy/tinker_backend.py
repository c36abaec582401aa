"""TinkerPolicy: the Policy protocol on Tinker's remote LoRA training and sampling (DESIGN §3).

Selected by `backend="tinker"` and `model=<a Tinker base model>`; the key comes from
`TINKER_API_KEY` (or the SDK's stored credentials). Only token ids and floats cross the
protocol; tinker types stay in this module.

**The SDPO step on Tinker.** Tinker computes the learner's logprobs and the backward pass on
its servers and applies one of a few built-in losses; we choose the inputs. The local loss
(`losses.clamped_is_surrogate`, token mean over the batch) is

    L_local = (1/N) Σ_t −sg(clamp(π_t/π_old,t, lo, hi)) · adv_t · log π_t   (+ β·KL)

and Tinker's documented `cispo` loss with `clip_low_threshold=lo, clip_high_threshold=hi` is

    L_cispo = Σ_t −sg(clamp(exp(log π_t − logprobs_t), lo, hi)) · advantages_t · log π_t

(`importance_sampling` has no clip, so it is not the SDPO objective). So the datum carries
`logprobs = log π_old` and `advantages = adv/N`: then L_cispo equals the surrogate part of
L_local term by term, in value and in gradient, for any ratio (tests/policy/test_tinker_contract.py checks both on a
real model). Prompt positions carry advantage 0 and contribute nothing.

**KL to the reference, folded into the advantages.** Tinker has no reference term and only
scalar logprobs, so the full-vocabulary KL of the local backend is replaced by its
sampled-token score-function form: `adv'_t = adv_t − β·(log π_old,t − log π_ref,t)`, with
`log π_ref` scored by a sampling client of the base weights. Its gradient,
`β·w_t·(log π_old − log π_ref)·∇log π`, equals the local `β·∇KL` *in expectation over
y ~ π_old* at the on-policy point (w = 1): `∇KL(π‖π_ref) = E_y~π[(log π(y) − log π_ref(y))
∇log π(y)]`. It is an unbiased one-sample estimate, not the same number (the contract test
checks the expectation exactly by enumeration). It is folded into every
`importance_sampling` datum. On a demonstration datum (learning/sdpo.py scores the reviewer's
call as an IS datum with `old = current`) the tokens were not sampled from π, so there the
same term is the gradient of `β/2·(log π(d) − log π_ref(d))²` per token — a pull toward the
reference, not a KL estimate. Plain `cross_entropy` datums get no KL term.

**Failure.** A missing key, an unreachable service, a timeout, or a refusal (auth, billing,
overload) raises `BackendUnavailable` with a message for the reviewer; the caller keeps the
decision queued and retries later. The SDK itself retries connection errors for up to five
minutes, so every wait here carries its own deadline and the connection is probed first
with the SDK's raw client, retries off.

Over 500 lines on purpose: the derivation above and the datum building that implements
it stay in one file, next to the one class that holds the remote clients under one lock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from continual_lsp.config import EMBEDDED_MODEL, Settings
from continual_lsp.policy.base import (
    AdapterInfo,
    BackendUnavailable,
    BackendVersion,
    Completion,
    Datum,
    LossName,
    SampleParams,
    TrainMetrics,
)

if TYPE_CHECKING:
    import tinker

    from continual_lsp.policy.tinker_render import TinkerRenderer

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_TINKER_MODEL = "Qwen/Qwen3-4B-Instruct-2507"  # compact dense instruct model on Tinker
INDEX_FILE = "tinker-adapters.json"  # adapter name → tinker:// paths, beside local adapters
MLP_TARGETS = frozenset({"gate_proj", "up_proj", "down_proj", "mlp", "w1", "w2", "w3"})
UNEMBED_TARGETS = frozenset({"lm_head", "unembed", "embed_tokens"})


# -- pure helpers (no network): datum building, slicing, metrics ---------------------------


def completion_logprobs(
    prompt_logprobs: Sequence[float | None], prompt_len: int, completion_len: int
) -> list[float]:
    """The completion's slice of a `compute_logprobs` result on `prompt + completion`.

    Tinker returns one entry per input token, entry i = log p(token i | tokens < i), entry 0
    None. The completion occupies input positions `[P, P+T)`, so its logprobs are
    `[P : P+T]` — not `[P-1 : P+T-1]`, which is the shifted-target convention of a raw
    logits tensor and would score every token with its predecessor's logprob.
    """
    if len(prompt_logprobs) != prompt_len + completion_len:
        raise ValueError(
            f"compute_logprobs returned {len(prompt_logprobs)} entries for "
            f"{prompt_len} + {completion_len} tokens"
        )
    picked = list(prompt_logprobs[prompt_len : prompt_len + completion_len])
    if any(x is None for x in picked):
        raise ValueError("compute_logprobs returned no logprob for a completion token")
    return [float(x) for x in picked if x is not None]


def fold_kl(
    advantages: Sequence[float],
    old_logprobs: Sequence[float],
    ref_logprobs: Sequence[float],
    kl_coef: float,
) -> list[float]:
    """`adv_t − β·(log π_old,t − log π_ref,t)`: the sampled-token KL penalty as advantage."""
    if not (len(advantages) == len(old_logprobs) == len(ref_logprobs)):
        raise ValueError("advantages, old and reference logprobs must align")
    return [
        a - kl_coef * (o - r)
        for a, o, r in zip(advantages, old_logprobs, ref_logprobs, strict=True)
    ]


@dataclass
class TinkerBatch:
    """The datums of one step, and what is needed to report it as the local backend does."""

    datums: list[tinker.Datum]
    loss_fn: str  # "cispo" or "cross_entropy"
    loss_fn_config: dict[str, float] | None
    total_tokens: int  # N: completion tokens in the batch (the local token-mean denominator)
    prompt_lens: list[int]
    old_logprobs: list[list[float]]  # per datum, completion positions (empty: plain CE)
    pg_advantages: list[list[float]]  # the local loss's `adv` in −w·adv·log π (CE: ones)
    reported_advantages: list[list[float]]  # the datum's advantages (zeros when absent)
    kl_terms: list[list[float]]  # per datum, log π_old − log π_ref (empty: no KL folded)


def _advantages(
    datum: Datum, loss: LossName, old: list[float], ref: Sequence[float] | None, kl_coef: float
) -> tuple[list[float], list[float], list[float]]:
    """(policy-gradient advantages, the same with the KL folded in, the KL term per token)."""
    n = len(datum.completion_tokens)
    if loss != "importance_sampling":  # cross_entropy: −w·log π is the surrogate with adv 1
        return [1.0] * n, [1.0] * n, []
    if len(datum.advantages) != n:
        raise ValueError(f"importance_sampling needs {n} advantages, got {len(datum.advantages)}")
    pg_adv = list(datum.advantages)
    if kl_coef > 0 and ref is not None:
        kl_term = [o - r for o, r in zip(old, ref, strict=True)]
        return pg_adv, fold_kl(pg_adv, old, ref, kl_coef), kl_term
    return pg_adv, pg_adv, []


def build_tinker_batch(
    batch: Sequence[Datum],
    loss: LossName,
    *,
    old_logprobs: Sequence[Sequence[float]] | None = None,
    ref_logprobs: Sequence[Sequence[float] | None] | None = None,
    kl_coef: float = 0.0,
    clip_low: float = 0.5,
    clip_high: float = 2.0,
) -> TinkerBatch:
    """Tinker datums whose server-side loss equals the local `train_step` loss.

    Layout (the cookbook's): `model_input = (prompt + completion)[:-1]`, `target_tokens =
    (prompt + completion)[1:]`; input position `P-1+t` predicts completion token `t`. Per
    position arrays have length `P+T-1`; prompt positions get advantage/weight 0.

    - `importance_sampling` → `cispo` with the clamp bounds; `logprobs` = old logprobs
      (the datum's, else `old_logprobs[i]`: the current weights, i.e. on-policy);
      `advantages` = (adv − β·(old − ref)) / N.
    - `cross_entropy` with old logprobs → `cispo` with advantages 1/N (the local CE term is
      `−w·log π` with the same clamped weight w); without → `cross_entropy`, weights 1/N.
    - `topk_distill` needs the teacher's full distribution: refused (local backend only).
    """
    import tinker

    if loss == "topk_distill":
        raise ValueError(
            "topk_distill needs full-vocabulary teacher distributions, which Tinker's scalar "
            "logprobs cannot give; use loss_mode='token' with the Tinker backend"
        )
    if not batch:
        raise ValueError("train_step needs at least one datum")
    total = sum(len(d.completion_tokens) for d in batch)
    if total == 0:
        raise ValueError("train_step got only empty completions")
    use_ratio = loss == "importance_sampling" or any(d.old_logprobs for d in batch)
    out = TinkerBatch(
        [], "cispo" if use_ratio else "cross_entropy", None, total, [], [], [], [], []
    )
    if use_ratio:
        out.loss_fn_config = {"clip_low_threshold": clip_low, "clip_high_threshold": clip_high}
    for i, datum in enumerate(batch):
        n = len(datum.completion_tokens)
        p = len(datum.prompt_tokens)
        if n == 0:
            continue
        if p == 0:
            raise ValueError("a Tinker datum needs a non-empty prompt")
        old = list(datum.old_logprobs) or (
            list(old_logprobs[i]) if old_logprobs is not None else []
        )
        if use_ratio and len(old) != n:
            raise ValueError(f"datum {i}: {len(old)} old logprobs for {n} completion tokens")
        ref = ref_logprobs[i] if ref_logprobs is not None else None
        pg_adv, folded, kl_term = _advantages(datum, loss, old, ref, kl_coef)
        full = [*datum.prompt_tokens, *datum.completion_tokens]
        pad = [0.0] * (p - 1)
        if use_ratio:
            inputs: dict[str, Any] = {
                "target_tokens": full[1:],
                "logprobs": pad + old,
                "advantages": pad + [a / total for a in folded],
            }
        else:
            inputs = {"target_tokens": full[1:], "weights": pad + [1.0 / total] * n}
        out.datums.append(
            tinker.Datum(model_input=tinker.ModelInput.from_ints(full[:-1]), loss_fn_inputs=inputs)
        )
        out.prompt_lens.append(p)
        out.old_logprobs.append(old if use_ratio else [])
        out.pg_advantages.append(pg_adv)
        out.reported_advantages.append(list(datum.advantages) or [0.0] * n)
        out.kl_terms.append(kl_term)
    return out


def batch_metrics(
    tb: TinkerBatch,
    learner_logprobs: Sequence[Sequence[float]],
    *,
    kl_coef: float,
    clip_low: float,
    clip_high: float,
    seconds: float,
) -> TrainMetrics:
    """The step's metrics in the local backend's terms, from Tinker's returned logprobs.

    `learner_logprobs[i]` is datum i's `logprobs` output (one per input position, the
    pre-step weights). `loss` is the local objective's value: the clamped surrogate's token
    mean, plus `β·mean(log π − log π_ref)` where KL was folded in (the sampled-token
    estimate; the local backend adds the exact full-vocab KL, so those parts agree in
    expectation only). `kl` is the mean `log π_old − log π_ref` folded into the advantages.
    """
    n = tb.total_tokens
    loss = kl_sum = adv_sum = ratio_sum = clipped = 0.0
    for i, p in enumerate(tb.prompt_lens):
        pg_adv = tb.pg_advantages[i]
        lp = [float(x) for x in list(learner_logprobs[i])[p - 1 : p - 1 + len(pg_adv)]]
        old = tb.old_logprobs[i] or lp  # plain cross-entropy: ratio 1
        for t, (a, x, o) in enumerate(zip(pg_adv, lp, old, strict=True)):
            ratio = math.exp(max(-20.0, min(20.0, x - o)))
            weight = min(max(ratio, clip_low), clip_high)
            loss -= weight * a * x
            ratio_sum += ratio
            clipped += float(ratio < clip_low or ratio > clip_high)
            if tb.kl_terms[i]:
                kl = tb.kl_terms[i][t]
                kl_sum += kl
                loss += kl_coef * (x - (o - kl))  # β·(log π − log π_ref)
        adv_sum += sum(tb.reported_advantages[i])
    return TrainMetrics(
        loss=loss / n,
        kl=kl_sum / n,
        mean_advantage=adv_sum / n,
        mean_ratio=ratio_sum / n,
        clipped_fraction=clipped / n,
        seconds=seconds,
        tokens=n,
    )


def cispo_loss_reference(
    target_logprobs: Any, datum: tinker.Datum, clip_low: float, clip_high: float
) -> Any:
    """Tinker's documented `cispo` loss on one datum, in torch (for tests and audits).

    `target_logprobs` is the learner's `(N,)` logprob of `target_tokens` (differentiable).
    From the Tinker docs: `ratio = exp(target − logprobs)`, `clipped = clamp(ratio, lo, hi)`,
    `loss = −(clipped.detach() · target · advantages).sum()`.
    """
    import torch

    sampling = datum.loss_fn_inputs["logprobs"].to_torch()
    advantages = datum.loss_fn_inputs["advantages"].to_torch()
    ratio = torch.exp(target_logprobs - sampling)
    clipped = torch.clamp(ratio, clip_low, clip_high)
    return -(clipped.detach() * target_logprobs * advantages).sum()


def cross_entropy_loss_reference(target_logprobs: Any, datum: tinker.Datum) -> Any:
    """Tinker's documented `cross_entropy` loss: `−(target_logprobs · weights).sum()`."""
    return -(target_logprobs * datum.loss_fn_inputs["weights"].to_torch()).sum()


# -- failure mapping and deadlines ---------------------------------------------------------


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def as_unavailable(exc: BaseException, what: str, base_url: str) -> BackendUnavailable | None:
    """The `BackendUnavailable` an SDK exception means, or None for a genuine bug."""
    import tinker

    if isinstance(exc, BackendUnavailable):
        return exc
    # What each SDK failure tells the reviewer ({what}: the operation, {why}: the cause).
    meanings: list[tuple[tuple[type[BaseException], ...], str]] = [
        (
            (TimeoutError, tinker.APITimeoutError),
            "Tinker did not answer in time while {what} ({url}); the step stays queued",
        ),
        (
            (tinker.APIConnectionError,),
            "cannot reach the Tinker service at {url} while {what}: {why}",
        ),
        (
            (tinker.AuthenticationError, tinker.PermissionDeniedError),
            "Tinker rejected the API key while {what}: check TINKER_API_KEY ({why})",
        ),
        (
            (tinker.BillingError,),
            "Tinker refused the request for billing reasons while {what}: {why}",
        ),
        (
            (tinker.RateLimitError, tinker.InternalServerError),
            "Tinker is overloaded or failing while {what}: {why}",
        ),
    ]
    for kinds, message in meanings:
        if isinstance(exc, kinds):
            return BackendUnavailable(message.format(what=what, url=base_url, why=_describe(exc)))
    if type(exc) is tinker.TinkerError:  # the SDK's own "no credentials" / bad key format
        return BackendUnavailable(
            f"no usable Tinker API key: {exc}. Set TINKER_API_KEY (keys start with 'tml-')."
        )
    return None


def run_with_deadline(fn: Callable[[], T], timeout: float, what: str) -> T:
    """`fn()` in a daemon thread, or TimeoutError after `timeout` seconds.

    The SDK's connection setup retries for minutes and cannot be cancelled; a daemon
    thread lets us stop waiting without blocking interpreter exit on it.
    """
    box: concurrent.futures.Future[T] = concurrent.futures.Future()

    def target() -> None:
        try:
            box.set_result(fn())
        except BaseException as exc:
            box.set_exception(exc)

    threading.Thread(target=target, name=f"tinker: {what}", daemon=True).start()
    return box.result(timeout=timeout)


def probe_service(base_url: str | None, api_key: str | None, timeout: float) -> None:
    """One health request with the SDK's raw client, no retries: fail fast, clearly.

    Raises BackendUnavailable for a missing/malformed key (checked by the SDK before any
    request), a refused or timed-out connection, or an auth failure. Any HTTP answer
    other than those means the service is there; the session setup does the rest.
    """
    import tinker
    from tinker._client import AsyncTinker
    from tinker.lib.base_url import resolve_base_url

    url = resolve_base_url(base_url)

    async def check() -> None:
        client = AsyncTinker(api_key=api_key, base_url=url, max_retries=0, timeout=timeout)
        try:
            await client.service.health_check()
        finally:
            await client.close()

    try:
        run_with_deadline(lambda: asyncio.run(check()), timeout + 2.0, "probing the service")
    except Exception as exc:
        mapped = as_unavailable(exc, "connecting", url)
        if mapped is not None:
            raise mapped from exc
        if isinstance(exc, tinker.NotFoundError):
            raise BackendUnavailable(
                f"{url} answered, but not as a Tinker service (no /api/v1/healthz): check TINKER_BASE_URL"
            ) from exc
        if isinstance(exc, tinker.APIStatusError):
            # Any other answer means something is serving the API; the session setup that
            # follows reports its own errors.
            log.debug(
                "Tinker health check answered %s; treating the service as reachable",
                exc.status_code,
            )
            return
        raise


# -- adapter files -------------------------------------------------------------------------


def to_peft_adapter(
    source: str | Path, target: str | Path, base_model: str, *, lora_alpha: float | None = None
) -> Path:
    """Convert a Tinker LoRA export (dense models) into a PEFT adapter directory.

    Tinker exports `adapter_model.safetensors` + `adapter_config.json` with PEFT-style keys
    (`base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight`), except the unembedding,
    exported as `model.unembed_tokens` (→ `lm_head`). MoE expert weights need per-family
    expansion: use `tinker_cookbook.weights.build_lora_adapter` for those.

    `lora_alpha`: rescale `lora_B` so the adapter computes the same update under this alpha
    (LocalPolicy builds its LoRA with `lora_alpha = 2·rank` and keeps its own config when it
    loads weights). None keeps the export's alpha.
    """
    import torch
    from safetensors.torch import load_file, save_file

    source, target = Path(source), Path(target)
    config = json.loads((source / "adapter_config.json").read_text())
    weights = load_file(str(source / "adapter_model.safetensors"))
    rank = int(config["r"])
    alpha = float(config.get("lora_alpha", rank))
    if any(".experts" in k for k in weights):
        raise ValueError(
            "this adapter has MoE expert weights; convert it with "
            "tinker_cookbook.weights.build_lora_adapter (see docs/tinker.md)"
        )
    scale = 1.0 if lora_alpha is None else alpha / float(lora_alpha)
    out: dict[str, torch.Tensor] = {}
    modules: set[str] = set()
    for key, tensor in weights.items():
        new_key = key.replace("model.unembed_tokens", "lm_head")
        if not new_key.startswith("base_model.model."):
            new_key = "base_model.model." + new_key
        if ".lora_B." in new_key and scale != 1.0:
            tensor = tensor * scale
        out[new_key] = tensor.contiguous()
        module = new_key.split(".lora_", 1)[0].rsplit(".", 1)[-1]
        modules.add(module)
    peft_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": rank,
        "lora_alpha": alpha if lora_alpha is None else lora_alpha,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "target_modules": sorted(modules),
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".partial-"))
    try:
        save_file(out, str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})
        (tmp / "adapter_config.json").write_text(json.dumps(peft_config, indent=1, sort_keys=True))
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


# -- the policy ----------------------------------------------------------------------------


def _targets_to_flags(targets: Sequence[str]) -> tuple[bool, bool, bool]:
    """(train_attn, train_mlp, train_unembed) for the local backend's `lora_targets`."""
    names = {t.rsplit(".", 1)[-1] for t in targets}
    mlp = bool(names & MLP_TARGETS)
    unembed = bool(names & UNEMBED_TARGETS)
    attn = bool(names - MLP_TARGETS - UNEMBED_TARGETS) or not (mlp or unembed)
    return attn, mlp, unembed


class TinkerPolicy(BackendVersion):
    """Implements `policy.base.Policy` on Tinker (remote LoRA training and sampling).

    Clients can be injected (`training_client`, `sampling_client`, `reference_client`,
    `renderer`) for tests; otherwise `connect()` creates them. Every remote wait has a
    deadline and maps service failures to `BackendUnavailable`.
    """

    backend: str = "tinker"
    scores_locally: bool = False
    manages_versions: bool = True  # versions are checkpoints on the service
    # Tinker does not report one: the 8192 tokens the agent has always budgeted.
    context_window: int = 8192

    def __init__(
        self,
        model_name: str = DEFAULT_TINKER_MODEL,
        *,
        rank: int = 16,
        lora_targets: Sequence[str] = ("q_proj", "k_proj", "v_proj", "o_proj"),
        seed: int | None = 0,
        kl_coef: float = 0.05,
        clip_low: float = 0.5,
        clip_high: float = 2.0,
        api_key: str | None = None,
        base_url: str | None = None,
        adapters_dir: str | Path | None = None,
        renderer_name: str | None = None,
        connect_timeout_s: float = 30.0,
        request_timeout_s: float = 900.0,
        service_client: Any = None,
        training_client: Any = None,
        sampling_client: Any = None,
        reference_client: Any = None,
        renderer: TinkerRenderer | None = None,
        connect: bool = True,
    ) -> None:
        self.model_name = model_name
        self.rank = rank
        self.lora_targets = list(lora_targets)
        self.seed = seed
        self.kl_coef = kl_coef
        self.clip_low = clip_low
        self.clip_high = clip_high
        self.api_key = api_key if api_key is not None else os.environ.get("TINKER_API_KEY") or None
        self.base_url = (
            base_url if base_url is not None else os.environ.get("TINKER_BASE_URL") or None
        )
        self.adapters_dir = Path(adapters_dir).expanduser() if adapters_dir else None
        self.renderer_name = renderer_name
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._service = service_client
        self._training = training_client
        self._sampling = sampling_client
        self._reference = reference_client
        self._renderer = renderer
        self._resume_state: str | None = None  # tinker:// state to resume training from
        self.steps = 0
        self._lock = threading.RLock()  # one remote operation sequence at a time
        if connect:
            self.connect()

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> TinkerPolicy:
        """Build from `Settings` (backend="tinker"); connects, or raises BackendUnavailable.

        `model` must name a Tinker base model; the embedded default is a local GGUF that
        Tinker does not serve, so it is replaced by `DEFAULT_TINKER_MODEL` (logged).
        """
        model = settings.model
        if model == EMBEDDED_MODEL or model.startswith("embedded:"):
            log.info(
                "backend=tinker: model %s is local-only; using %s", model, DEFAULT_TINKER_MODEL
            )
            model = DEFAULT_TINKER_MODEL
        from continual_lsp.policy.adapter_registry import adapters_dir

        kwargs: dict[str, Any] = {
            "rank": settings.lora_rank,
            "lora_targets": settings.lora_targets,
            "seed": settings.seed,
            "kl_coef": settings.kl_coef,
            "clip_low": settings.is_clip_low,
            "clip_high": settings.is_clip_high,
            "adapters_dir": adapters_dir(settings),
        }
        kwargs.update(overrides)
        return cls(model, **kwargs)

    # -- connection ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        from tinker.lib.base_url import resolve_base_url

        return resolve_base_url(self.base_url)

    def connect(self) -> None:
        """Probe the service, open a session, and create the base-model sampler (which is
        also the KL reference) and the renderer.

        The LoRA training client is created only when first needed (`_ensure_training`): a
        process that only samples (the editor's server, while the worker trains) never
        allocates one. A fresh LoRA adapter computes the base model, so until the first step
        or `load_adapter` the sampler *is* the reference client. Idempotent; on failure
        raises BackendUnavailable and may be called again later.
        """
        with self._lock:
            if (
                self._sampling is not None
                and self._reference is not None
                and self._renderer is not None
            ):
                return
            probe_service(self.base_url, self.api_key, min(10.0, self.connect_timeout_s))
            # Session setup can queue on the server, so this deadline is the request
            # timeout, not the (short) probe timeout.
            self._call(self._open_session, "opening a Tinker session")

    def _open_session(self) -> None:
        import tinker

        from continual_lsp.policy.tinker_render import make_tinker_renderer

        if self._service is None:
            self._service = tinker.ServiceClient(base_url=self.base_url, api_key=self.api_key)
        if self._reference is None:
            self._reference = self._service.create_sampling_client(
                base_model=self.model_name
            ).result(timeout=self.request_timeout_s)
        if self._renderer is None:
            tokenizer = self._reference.get_tokenizer()
            self._renderer = make_tinker_renderer(self.model_name, tokenizer, self.renderer_name)
        if self._sampling is None:
            self._sampling = self._reference

    def _ensure_training(self) -> Any:
        """The LoRA training client: resumed from `load_adapter`'s state, else fresh."""
        self._require()
        if self._training is not None:
            return self._training

        def create() -> Any:
            if self._resume_state is not None:
                return self._service.create_training_client_from_state_with_optimizer(
                    self._resume_state
                ).result(timeout=self.request_timeout_s)
            attn, mlp, unembed = _targets_to_flags(self.lora_targets)
            return self._service.create_lora_training_client(
                base_model=self.model_name,
                rank=self.rank,
                seed=self.seed,
                train_attn=attn,
                train_mlp=mlp,
                train_unembed=unembed,
            ).result(timeout=self.request_timeout_s)

        self._training = self._call(create, "creating the LoRA training client")
        self._resume_state = None
        return self._training

    def _call(self, fn: Callable[[], T], what: str, timeout: float | None = None) -> T:
        """Run a remote operation with a deadline; service failures → BackendUnavailable."""
        try:
            return run_with_deadline(fn, timeout or self.request_timeout_s, what)
        except Exception as exc:
            mapped = as_unavailable(exc, what, self.url)
            if mapped is not None:
                raise mapped from exc
            raise

    def _require(self) -> None:
        if self._sampling is None or self._renderer is None or self._reference is None:
            self.connect()

    def close(self) -> None:
        """End the Tinker session (best effort; a dead service is not an error here)."""
        service, self._service = self._service, None
        if service is not None:
            try:
                service.close("success").result(timeout=10)
            except Exception as exc:
                log.debug("closing the Tinker session failed: %s", exc)

    # -- Policy protocol: identity ---------------------------------------------------------

    @property
    def renderer(self) -> TinkerRenderer:
        self._require()
        assert self._renderer is not None
        return self._renderer

    @property
    def tokenizer(self) -> Any:
        """The base model's tokenizer (learning/sdpo.py splices the teacher turn with it)."""
        return self.renderer.tokenizer

    # -- sampling and scoring --------------------------------------------------------------

    def sample(self, prompt_tokens: list[int], params: SampleParams) -> Completion:
        """One completion with its per-token logprobs under the current weights.

        Tinker returns the sampled tokens' logprobs; they are the policy's own (π at
        temperature 1) only when sampling at temperature 1. Greedy (temperature 0) is
        sampled as top_k=1 and other temperatures as asked, and both are then rescored with
        `compute_logprobs`: SDPO's ratio and advantages need π, not the tempered sampler.
        """
        return self.sample_batch(prompt_tokens, params, 1)[0]

    def sample_batch(
        self, prompt_tokens: list[int], params: SampleParams, n: int
    ) -> list[Completion]:
        """`n` completions in one request (`num_samples=n`), each with logprobs as `sample`."""
        import tinker

        self._require()
        if n < 1:
            raise ValueError(f"need at least one candidate, asked for {n}")
        start = time.perf_counter()
        greedy = params.temperature <= 0.0
        sampling_params = tinker.SamplingParams(
            max_tokens=params.max_tokens,
            seed=params.seed,
            temperature=1.0 if greedy else params.temperature,
            top_k=1 if greedy else -1,
            stop=self.renderer.stop(),
        )
        prompt = tinker.ModelInput.from_ints(list(prompt_tokens))
        response = self._call(
            lambda: self._sampling.sample(prompt, n, sampling_params).result(
                timeout=self.request_timeout_s
            ),
            "sampling",
        )
        if len(response.sequences) != n:
            raise BackendUnavailable(
                f"Tinker returned {len(response.sequences)} samples where {n} were asked"
            )
        out = []
        for sequence in response.sequences:
            tokens = [int(t) for t in sequence.tokens]
            logprobs = sequence.logprobs
            if (
                greedy
                or params.temperature != 1.0
                or logprobs is None
                or len(logprobs) != len(tokens)
            ):
                logprobs = self.logprobs(list(prompt_tokens), tokens)
            out.append(
                Completion(
                    tokens=tokens,
                    logprobs=[float(x) for x in logprobs],
                    text=self.renderer.decode(tokens),
                    seconds=time.perf_counter() - start,
                )
            )
        return out

    def logprobs(self, prompt_tokens: list[int], completion_tokens: list[int]) -> list[float]:
        """Current weights' logprob of each completion token (`compute_logprobs`, `[P:P+T]`)."""
        self._require()
        return self._score(self._sampling, prompt_tokens, completion_tokens, "scoring")

    def logprobs_batch(
        self, prompt_tokens: list[int], completions: list[list[int]]
    ) -> list[list[float]]:
        """`logprobs` of each completion: every request is submitted before any is awaited."""
        self._require()
        if not prompt_tokens:
            raise ValueError("logprobs needs a non-empty prompt")
        futures = [
            self._submit_score(self._sampling, prompt_tokens, c) if c else None for c in completions
        ]
        return [
            completion_logprobs(
                self._call(lambda f=f: f.result(timeout=self.request_timeout_s), "scoring"),
                len(prompt_tokens),
                len(c),
            )
            if f is not None
            else []
            for f, c in zip(futures, completions, strict=True)
        ]

    def reference_logprobs(
        self, prompt_tokens: list[int], completion_tokens: list[int]
    ) -> list[float]:
        """The same scores under the base model (the frozen reference)."""
        self._require()
        return self._score(
            self._reference, prompt_tokens, completion_tokens, "scoring the reference"
        )

    def _score(
        self, client: Any, prompt_tokens: list[int], completion_tokens: list[int], what: str
    ) -> list[float]:
        if not completion_tokens:
            return []
        if not prompt_tokens:
            raise ValueError("logprobs needs a non-empty prompt")
        future = self._submit_score(client, prompt_tokens, completion_tokens)
        values = self._call(lambda: future.result(timeout=self.request_timeout_s), what)
        return completion_logprobs(values, len(prompt_tokens), len(completion_tokens))

    @staticmethod
    def _submit_score(
        client: Any, prompt_tokens: Sequence[int], completion_tokens: Sequence[int]
    ) -> Any:
        import tinker

        sequence = tinker.ModelInput.from_ints([*prompt_tokens, *completion_tokens])
        # Score only the completion: the server may serve the prompt from its prefix cache.
        return client.compute_logprobs(sequence, prompt_logprobs_last_n=len(completion_tokens))

    # -- training --------------------------------------------------------------------------

    def train_step(
        self,
        batch: list[Datum],
        loss: LossName,
        lr: float,
        *,
        kl_coef: float | None = None,
        clip_low: float | None = None,
        clip_high: float | None = None,
        max_grad_norm: float | None = 1.0,
    ) -> TrainMetrics:
        """One SDPO step: datums → forward_backward(cispo) + optim_step → fresh sampler.

        Options as the local `train_step` (None: this policy's own): `kl_coef`,
        `clip_low`, `clip_high`, `max_grad_norm` (Tinker's `grad_clip_norm`); the local
        backend's `alpha` and `prefix_cache` have no meaning here and are refused. Adam
        matches torch's AdamW defaults (β=(0.9, 0.999), eps 1e-8, no weight decay) so a
        learning rate means the same on both backends. Both requests are submitted before
        either is awaited, so they queue together on the server.
        """
        import tinker

        self._require()
        start = time.perf_counter()
        kl_coef = float(self.kl_coef if kl_coef is None else kl_coef)
        clip_low = float(self.clip_low if clip_low is None else clip_low)
        clip_high = float(self.clip_high if clip_high is None else clip_high)
        with self._lock:
            olds, refs = self._step_scores(batch, loss, kl_coef)
            tb = build_tinker_batch(
                batch,
                loss,
                old_logprobs=[o or [] for o in olds],
                ref_logprobs=refs,
                kl_coef=kl_coef,
                clip_low=clip_low,
                clip_high=clip_high,
            )
            adam = tinker.AdamParams(
                learning_rate=lr,
                beta1=0.9,
                beta2=0.999,
                eps=1e-8,
                weight_decay=0.0,
                grad_clip_norm=float(max_grad_norm or 0.0),
            )

            trainer = self._ensure_training()

            def step() -> Any:
                fb_future = trainer.forward_backward(tb.datums, tb.loss_fn, tb.loss_fn_config)
                optim_future = trainer.optim_step(adam)
                result = fb_future.result(timeout=self.request_timeout_s)
                optim_future.result(timeout=self.request_timeout_s)
                return result

            result = self._call(step, "training")
            # The retry must sample from the new weights: a fresh snapshot sampler.
            self._sampling = self._call(
                lambda: trainer.save_weights_and_get_sampling_client().result(
                    timeout=self.request_timeout_s
                ),
                "publishing the new weights",
            )
            self.steps += 1
        learner = [output["logprobs"].tolist() for output in result.loss_fn_outputs]
        return batch_metrics(
            tb,
            learner,
            kl_coef=kl_coef,
            clip_low=clip_low,
            clip_high=clip_high,
            seconds=time.perf_counter() - start,
        )

    def _step_scores(
        self, batch: list[Datum], loss: LossName, kl_coef: float
    ) -> tuple[list[list[float] | None], list[list[float] | None]]:
        """Old logprobs for datums that came without (on-policy: the current weights) and
        reference logprobs for the KL, all submitted at once, then awaited."""
        need_old = loss == "importance_sampling" or any(d.old_logprobs for d in batch)
        old_futures = [
            self._submit_score(self._sampling, d.prompt_tokens, d.completion_tokens)
            if need_old and not d.old_logprobs and d.completion_tokens
            else None
            for d in batch
        ]
        ref_futures = [
            self._submit_score(self._reference, d.prompt_tokens, d.completion_tokens)
            if loss == "importance_sampling" and kl_coef > 0 and d.completion_tokens
            else None
            for d in batch
        ]

        def gather(futures: list[Any]) -> list[list[float] | None]:
            out: list[list[float] | None] = []
            for datum, fut in zip(batch, futures, strict=True):
                if fut is None:
                    out.append(None)
                    continue
                values = fut.result(timeout=self.request_timeout_s)
                out.append(
                    completion_logprobs(
                        values, len(datum.prompt_tokens), len(datum.completion_tokens)
                    )
                )
            return out

        olds = self._call(lambda: gather(old_futures), "scoring the proposal")
        refs = self._call(lambda: gather(ref_futures), "scoring the reference")
        return olds, refs

    # -- adapters --------------------------------------------------------------------------

    def _index_path(self) -> Path:
        if self.adapters_dir is None:
            raise ValueError("TinkerPolicy needs adapters_dir to record adapter versions")
        return self.adapters_dir / INDEX_FILE

    def _read_index(self) -> dict[str, dict[str, Any]]:
        path = self._index_path()
        if not path.is_file():
            return {}
        data: dict[str, dict[str, Any]] = json.loads(path.read_text())
        return data

    def _write_index(self, index: dict[str, dict[str, Any]]) -> None:
        path = self._index_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(index, indent=1, sort_keys=True))
        os.replace(tmp, path)

    def save_adapter(self, name: str) -> AdapterInfo:
        """Save the weights and optimizer state as version `name` on Tinker.

        `save_state` (resumable, optimizer included) and sampler weights are saved remotely;
        the local record `adapters_dir/tinker-adapters.json` maps `name` to both paths.
        `AdapterInfo.path` is the `tinker://` state path and `sha256` fingerprints the
        record (the bytes live remotely; `download_adapter` fetches them).
        """
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad adapter name {name!r}")
        self._require()
        with self._lock:
            index = self._read_index()
            if name in index:
                raise FileExistsError(f"adapter version {name} already exists")

            trainer = self._ensure_training()

            def save() -> tuple[str, str]:
                state_future = trainer.save_state(name)
                sampler_future = trainer.save_weights_for_sampler(name)
                return (
                    state_future.result(timeout=self.request_timeout_s).path,
                    sampler_future.result(timeout=self.request_timeout_s).path,
                )

            state_path, sampler_path = self._call(save, "saving the adapter")
            record = {
                "state": state_path,
                "sampler": sampler_path,
                "base_model": self.model_name,
                "rank": self.rank,
                "steps": self.steps,
            }
            index[name] = record
            self._write_index(index)
            self._adapter_version = name
        digest = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
        return AdapterInfo(name=name, path=state_path, sha256=digest)

    def _resolve(self, name: str) -> tuple[str | None, dict[str, Any]]:
        """(version name, index record) for a version name or a `tinker://` path."""
        if name.startswith("tinker://"):
            index = self._read_index() if self.adapters_dir is not None else {}
            for version, record in index.items():
                if name in (record.get("state"), record.get("sampler")):
                    return version, record
            if "/sampler_weights/" in name:
                return None, {"state": None, "sampler": name}
            return None, {"state": name, "sampler": None}
        index = self._read_index()
        if name not in index:
            raise FileNotFoundError(f"no Tinker adapter version {name!r} in {self._index_path()}")
        return name, index[name]

    def load_adapter(self, name: str) -> None:
        """Switch to version `name`, a `tinker://` path (as `AdapterInfo.path` gives), or
        `""` for the base weights.

        Sampling moves to the version's sampler weights at once. Training resumes from its
        saved state, weights and Adam moments, when the next step needs a training client
        (`create_training_client_from_state_with_optimizer`); a process that only samples
        never pays for one.
        """
        self._require()
        if not name:
            with self._lock:
                self._sampling = self._reference  # a fresh LoRA adapter is the base model
                self._training = None
                self._resume_state = None
                self._adapter_version = None
            return
        version, record = self._resolve(name)

        def load() -> Any:
            if record.get("sampler"):
                return self._service.create_sampling_client(model_path=record["sampler"]).result(
                    timeout=self.request_timeout_s
                )
            return None

        with self._lock:
            sampling = self._call(load, "loading the adapter")
            if record.get("state"):
                self._training = None
                self._resume_state = record["state"]
            if sampling is None:  # a bare state path: publish its weights for sampling
                trainer = self._ensure_training()
                sampling = self._call(
                    lambda: trainer.save_weights_and_get_sampling_client().result(
                        timeout=self.request_timeout_s
                    ),
                    "loading the adapter",
                )
            self._sampling = sampling
            self._adapter_version = version

    def download_adapter(
        self, name: str | None, target: str | Path, *, lora_alpha: float | None = None
    ) -> Path:
        """Fetch an adapter as a PEFT directory (adapter_config.json + safetensors).

        `name`: a saved version, or None for the current weights. The weights are exported
        with `save_weights_external` (one hour TTL), downloaded from the signed URLs the
        RestClient gives, then converted by `to_peft_adapter` (`lora_alpha=2·rank` makes
        them load into LocalPolicy unchanged). The local backend can then use them offline
        with the same base model given as a local `model=` directory.
        """
        import tinker

        self._require()
        target = Path(target)
        if target.exists():
            raise FileExistsError(f"{target} already exists")

        current = self._ensure_training() if name is None or name == self._adapter_version else None

        def export() -> str:
            training = current
            if training is None:  # an older version: load it into a temporary training run
                training = self._service.create_training_client_from_state(
                    self._resolve(name)[1]["state"]
                ).result(timeout=self.request_timeout_s)
            label = f"{name or 'current'}-export-{int(time.time())}"
            saved = training.save_weights_external(label, ttl_seconds=3600).result(
                timeout=self.request_timeout_s
            )
            return str(saved.path)

        path = self._call(export, "exporting the adapter")
        rest = tinker.RestClient(base_url=self.base_url, api_key=self.api_key)
        urls = self._call(
            lambda: (
                rest.get_external_weights_urls(path).result(timeout=self.request_timeout_s).urls
            ),
            "fetching download links",
        )
        with tempfile.TemporaryDirectory(prefix="tinker-adapter-") as tmp:
            for relative, url in urls.items():
                local = (Path(tmp) / relative).resolve()
                if Path(tmp).resolve() not in local.parents:
                    raise ValueError(f"unsafe path in the export: {relative!r}")
                local.parent.mkdir(parents=True, exist_ok=True)
                self._call(
                    lambda url=url, local=local: urllib.request.urlretrieve(url, str(local)),
                    f"downloading {relative}",
                )
            return to_peft_adapter(tmp, target, self.model_name, lora_alpha=lora_alpha)
