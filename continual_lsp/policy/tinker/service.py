"""The Tinker service: failure mapping, deadlines, and the connection every policy call uses.

overload) raises `BackendUnavailable` with a message for the reviewer; the caller keeps the
decision queued and retries later. The SDK itself retries connection errors for up to five
minutes, so every wait here carries its own deadline and the connection is probed first
with the SDK's raw client, retries off.


`TinkerSession` holds the remote clients under one lock; `TinkerPolicy` (tinker_policy.py)
adds sampling and training on them, `TinkerCheckpoints` (tinker_checkpoints.py) the versions.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from continual_lsp.policy.base import BackendUnavailable, BackendVersion
from continual_lsp.policy.tinker.tinker_render import TinkerRenderer, make_tinker_renderer

log = logging.getLogger(__name__)

T = TypeVar("T")

MLP_TARGETS = frozenset({"gate_proj", "up_proj", "down_proj", "mlp", "w1", "w2", "w3"})
UNEMBED_TARGETS = frozenset({"lm_head", "unembed", "embed_tokens"})


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


def _targets_to_flags(targets: Sequence[str]) -> tuple[bool, bool, bool]:
    """(train_attn, train_mlp, train_unembed) for the local backend's `lora_targets`."""
    names = {t.rsplit(".", 1)[-1] for t in targets}
    mlp = bool(names & MLP_TARGETS)
    unembed = bool(names & UNEMBED_TARGETS)
    attn = bool(names - MLP_TARGETS - UNEMBED_TARGETS) or not (mlp or unembed)
    return attn, mlp, unembed


class TinkerSession(BackendVersion):
    """The remote clients of one Tinker session and the deadline every remote wait has.

    The attributes are set by `TinkerPolicy.__init__` (clients may be injected there for
    tests); `connect()` creates the missing ones. Service failures become
    `BackendUnavailable`.
    """

    model_name: str
    rank: int
    lora_targets: list[str]
    seed: int | None
    api_key: str | None
    base_url: str | None
    adapters_dir: Path | None
    renderer_name: str | None
    connect_timeout_s: float
    request_timeout_s: float
    _service: Any
    _training: Any
    _sampling: Any
    _reference: Any
    _renderer: TinkerRenderer | None
    _resume_state: str | None
    _lock: threading.RLock

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
