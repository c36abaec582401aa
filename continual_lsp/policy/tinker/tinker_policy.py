"""TinkerPolicy: the Policy protocol on Tinker's remote LoRA training and sampling (DESIGN §3).

Selected by `backend="tinker"` and `model=<a Tinker base model>`; the key comes from
`TINKER_API_KEY` (or the SDK's stored credentials). Only token ids and floats cross the
protocol; tinker types stay in this package.

Why the step's datums compute the local backend's loss: datums.py. Connection and
failures: service.py. Adapter versions: tinker_checkpoints.py.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from continual_lsp.config import EMBEDDED_MODEL, Settings
from continual_lsp.policy.adapter_registry import adapters_dir
from continual_lsp.policy.base import (
    BackendUnavailable,
    Completion,
    Datum,
    LossName,
    SampleParams,
    TrainMetrics,
)
from continual_lsp.policy.tinker.datums import (
    batch_metrics,
    build_tinker_batch,
    completion_logprobs,
)
from continual_lsp.policy.tinker.tinker_checkpoints import TinkerCheckpoints
from continual_lsp.policy.tinker.tinker_render import TinkerRenderer

log = logging.getLogger(__name__)

DEFAULT_TINKER_MODEL = "Qwen/Qwen3-4B-Instruct-2507"  # compact dense instruct model on Tinker


class TinkerPolicy(TinkerCheckpoints):
    """Implements `policy.base.Policy` on Tinker (remote LoRA training and sampling).

    Clients can be injected (`training_client`, `sampling_client`, `reference_client`,
    `renderer`) for tests; otherwise `connect()` creates them. Every remote wait has a
    deadline and maps service failures to `BackendUnavailable`.
    """

    backend: str = "tinker"
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

    # -- sampling and scoring --------------------------------------------------------------

    def logit_scorer(self) -> None:
        """Off-box: scores of given tokens only, no full distributions."""
        return None

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
