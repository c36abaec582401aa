"""TinkerPolicy without the service: the datum path against a recording fake training
client (the SDK's real `types`), the teacher-logprob alignment, and the failure behaviour
with the SDK's own clients pointed at local addresses (closed port, a server that hangs,
a server that is not Tinker) and with no key.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

tinker = pytest.importorskip("tinker")

from continual_lsp.config import Settings  # noqa: E402
from continual_lsp.policy.base import (  # noqa: E402
    BackendUnavailable,
    Datum,
    Policy,
    SampleParams,
)
from continual_lsp.policy.tinker import service as tinker_service  # noqa: E402
from continual_lsp.policy.tinker.datums import (  # noqa: E402
    build_tinker_batch,
    completion_logprobs,
    fold_kl,
)
from continual_lsp.policy.tinker.service import as_unavailable  # noqa: E402
from continual_lsp.policy.tinker.tinker_policy import DEFAULT_TINKER_MODEL, TinkerPolicy  # noqa: E402
from tests.policy.tinker.tinker_fakes import (  # noqa: E402
    EDIT_CORRECTION,
    Events,
    FakeFuture,
    FakeSamplingClient,
    FakeService,
    FakeTrainingClient,
    HangingFuture,
    StubRenderer,
    edit_job,
    encoded_logprob,
    fake_tinker_policy,
)


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture
def policy(events: Events, tmp_path: Path) -> TinkerPolicy:
    return TinkerPolicy(
        "Qwen/Qwen3-4B-Instruct-2507",
        service_client=FakeService(events),
        training_client=FakeTrainingClient(events),
        sampling_client=FakeSamplingClient(events, "current"),
        reference_client=FakeSamplingClient(events, "reference"),
        renderer=StubRenderer(),
        adapters_dir=tmp_path / "adapters",
        connect=False,
        kl_coef=0.1,
    )


PROMPT = [11, 12, 13, 14, 15]
COMPLETION = [21, 22, 23]


# -- alignment -----------------------------------------------------------------------------


def test_completion_slice_is_p_to_p_plus_t() -> None:
    """Entry i of compute_logprobs scores token i: the completion is [P : P+T], not [P-1 : …]."""
    values = [None, *(float(i) for i in range(1, 8))]
    assert completion_logprobs(values, 5, 3) == [5.0, 6.0, 7.0]
    with pytest.raises(ValueError, match="entries"):
        completion_logprobs(values, 5, 2)
    with pytest.raises(ValueError, match="no logprob"):
        completion_logprobs([None, None, None], 1, 2)


def test_teacher_logprobs_align_with_completion_tokens(policy: TinkerPolicy) -> None:
    """The values encode their position, so an off-by-one would show as shifted positions."""
    got = policy.logprobs(PROMPT, COMPLETION)
    assert got == [encoded_logprob(i) for i in (5, 6, 7)]
    assert got != [encoded_logprob(i) for i in (4, 5, 6)]  # the [P-1 : P+T-1] mistake
    ids, last_n = policy._sampling.calls[-1]
    assert ids == PROMPT + COMPLETION and last_n == len(COMPLETION)
    ref = policy.reference_logprobs(PROMPT, COMPLETION)
    assert ref == [encoded_logprob(i, "reference") for i in (5, 6, 7)]


def test_logprobs_batch_submits_every_request_before_waiting(
    policy: TinkerPolicy, events: Events
) -> None:
    """A retry's candidates are scored in one round trip, each aligned as `logprobs`."""
    events.clear()
    got = policy.logprobs_batch(PROMPT, [COMPLETION, [], [21]])
    assert got == [[encoded_logprob(i) for i in (5, 6, 7)], [], [encoded_logprob(5)]]
    assert events == ["compute_logprobs:current"] * 2 + ["wait:compute_logprobs:current"] * 2


def test_policy_satisfies_the_protocol(policy: TinkerPolicy) -> None:
    assert isinstance(policy, Policy)
    assert policy.backend == "tinker" and policy.adapter_version is None
    assert policy.logit_scorer() is None  # off-box: scores of given tokens only


# -- sampling ------------------------------------------------------------------------------


def test_sample_greedy_is_top_k_1_and_rescored(policy: TinkerPolicy, events: Events) -> None:
    completion = policy.sample(PROMPT, SampleParams(temperature=0.0, max_tokens=16))
    params = policy._sampling.last_params
    assert params.top_k == 1 and params.temperature == 1.0 and params.max_tokens == 16
    assert params.stop == [2]
    assert completion.tokens == [7, 8, 9, 2]
    # Greedy sampler logprobs are not π's: they were replaced by a compute_logprobs pass.
    assert completion.logprobs == [encoded_logprob(i) for i in range(5, 9)]
    assert completion.text == "7 8 9 2"


def test_sample_at_temperature_one_keeps_sampler_logprobs(
    policy: TinkerPolicy, events: Events
) -> None:
    completion = policy.sample(PROMPT, SampleParams(temperature=1.0))
    assert completion.logprobs == [-0.5] * 4
    assert "compute_logprobs:current" not in events


def test_sample_batch_is_one_request_for_n_samples(policy: TinkerPolicy, events: Events) -> None:
    """The retry's candidates: one `sample` request with num_samples=n, n completions back."""
    completions = policy.sample_batch(PROMPT, SampleParams(temperature=1.0, seed=3), 4)
    assert events.count("sample:current") == 1
    assert len(completions) == 4
    assert all(c.tokens == [7, 8, 9, 2] and c.logprobs == [-0.5] * 4 for c in completions)
    with pytest.raises(ValueError, match="at least one"):
        policy.sample_batch(PROMPT, SampleParams(), 0)


# -- the datum path ------------------------------------------------------------------------


def test_train_step_builds_cispo_datums_and_submits_before_waiting(
    policy: TinkerPolicy, events: Events
) -> None:
    old = [-1.0, -2.0, -3.0]
    adv = [0.5, -0.25, 1.0]
    batch = [
        Datum(prompt_tokens=PROMPT, completion_tokens=COMPLETION, advantages=adv, old_logprobs=old),
        Datum(
            prompt_tokens=[31, 32], completion_tokens=[41, 42], advantages=[1.0, 1.0]
        ),  # on-policy
    ]
    training = policy._training
    metrics = policy.train_step(batch, "importance_sampling", 1e-4, clip_low=0.5, clip_high=2.0)

    # forward_backward and optim_step are both submitted before either is awaited.
    fb = events.index("forward_backward")
    assert events[fb + 1] == "optim_step"
    assert events.index("wait:forward_backward") > fb + 1
    assert events.index("save_weights_and_get_sampling_client") > events.index("wait:optim_step")

    data, loss_fn, config = training.forward_backward_calls[0]
    assert loss_fn == "cispo"
    assert config == {"clip_low_threshold": 0.5, "clip_high_threshold": 2.0}
    assert all(isinstance(d, tinker.Datum) for d in data)
    n = 5  # completion tokens in the batch: the local token-mean denominator
    first = data[0]
    assert first.model_input.to_ints() == (PROMPT + COMPLETION)[:-1]
    inputs = {k: v.tolist() for k, v in first.loss_fn_inputs.items()}
    assert inputs["target_tokens"] == (PROMPT + COMPLETION)[1:]
    assert inputs["logprobs"] == pytest.approx([0.0] * 4 + old)
    ref = [encoded_logprob(i, "reference") for i in (5, 6, 7)]
    folded = [a - 0.1 * (o - r) for a, o, r in zip(adv, old, ref, strict=True)]
    assert inputs["advantages"] == pytest.approx([0.0] * 4 + [a / n for a in folded], rel=1e-6)
    # The on-policy datum got its old logprobs from the current sampler, [P:P+T].
    second = {k: v.tolist() for k, v in data[1].loss_fn_inputs.items()}
    assert second["logprobs"] == pytest.approx(
        [0.0] + [encoded_logprob(i) for i in (2, 3)], rel=1e-6
    )

    adam = training.optim_calls[0]
    assert adam.learning_rate == 1e-4 and adam.weight_decay == 0.0 and adam.grad_clip_norm == 1.0
    # A fresh sampler on the new weights serves the retry.
    assert policy._sampling.weights == "step1"
    assert metrics.tokens == n and metrics.mean_advantage == pytest.approx((sum(adv) + 2.0) / n)
    assert 0.0 <= metrics.clipped_fraction <= 1.0


def test_local_only_step_options_are_refused(policy: TinkerPolicy) -> None:
    batch = [Datum(prompt_tokens=PROMPT, completion_tokens=COMPLETION)]
    with pytest.raises(TypeError, match="prefix_cache"):
        policy.train_step(batch, "cross_entropy", 1e-4, prefix_cache=False)  # type: ignore[call-arg]
    assert policy._training.forward_backward_calls == []


def test_cross_entropy_without_old_logprobs_uses_weights(policy: TinkerPolicy) -> None:
    batch = [Datum(prompt_tokens=PROMPT, completion_tokens=COMPLETION)]
    policy.train_step(batch, "cross_entropy", 1e-4)
    data, loss_fn, config = policy._training.forward_backward_calls[0]
    assert loss_fn == "cross_entropy" and config is None
    weights = data[0].loss_fn_inputs["weights"].tolist()
    assert weights == pytest.approx([0.0] * 4 + [1 / 3] * 3)


def test_topk_distill_is_refused() -> None:
    batch = [Datum(prompt_tokens=PROMPT, completion_tokens=COMPLETION, advantages=[0.0] * 3)]
    with pytest.raises(ValueError, match="topk_distill"):
        build_tinker_batch(batch, "topk_distill")


def test_fold_kl() -> None:
    assert fold_kl([1.0, 0.0], [-1.0, -2.0], [-1.5, -1.0], 0.5) == pytest.approx([0.75, 0.5])


# -- adapters: save_state, resume ----------------------------------------------------------


def test_save_and_resume(policy: TinkerPolicy, events: Events, tmp_path: Path) -> None:
    info = policy.save_adapter("v1")
    assert info.path == "tinker://run-1/weights/v1" and len(info.sha256) == 64
    assert policy.adapter_version == "v1"
    index = json.loads((tmp_path / "adapters" / "tinker-adapters.json").read_text())
    assert index["v1"]["sampler"] == "tinker://run-1/sampler_weights/v1"
    with pytest.raises(FileExistsError):
        policy.save_adapter("v1")

    service = policy._service
    policy._adapter_version = None
    policy.load_adapter("v1")
    # Sampling moves to the version's sampler weights at once ...
    assert service.loaded == ["tinker://run-1/sampler_weights/v1"]
    assert policy.adapter_version == "v1" and policy._sampling.weights == "step1"
    # ... and training resumes from its state (weights + Adam) when a step needs it.
    assert policy._training is None
    batch = [Datum(prompt_tokens=PROMPT, completion_tokens=COMPLETION, advantages=[0.1] * 3)]
    policy.train_step(batch, "importance_sampling", 1e-4)
    assert service.loaded[-1] == "tinker://run-1/weights/v1"
    assert policy._training is not None and policy._training.forward_backward_calls
    with pytest.raises(FileNotFoundError):
        policy.load_adapter("v9")

    # The path AdapterInfo gave (what the store records) finds the same version and sampler.
    policy.load_adapter(info.path)
    assert (
        policy.adapter_version == "v1" and service.loaded[-1] == "tinker://run-1/sampler_weights/v1"
    )
    # "" = the base weights: the reference sampler, and a fresh adapter on the next step.
    policy.load_adapter("")
    assert policy.adapter_version is None and policy._sampling is policy._reference
    assert policy._training is None and policy._resume_state is None


def test_sampling_only_process_never_creates_a_training_client(
    events: Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    class BaseOnlyService(FakeService):
        def create_sampling_client(
            self, model_path: str | None = None, base_model: str | None = None
        ) -> FakeFuture:
            self.loaded.append(f"base:{base_model}")
            return FakeFuture(self.events, "sampler", FakeSamplingClient(self.events, "reference"))

    monkeypatch.setattr(tinker_service, "probe_service", lambda *args: None)
    service = BaseOnlyService(events)
    policy = TinkerPolicy("Qwen/Qwen3-8B", service_client=service, renderer=StubRenderer())
    # A fresh adapter is the base model: the sampler is the reference client until a step.
    assert service.loaded == ["base:Qwen/Qwen3-8B"]
    assert policy._sampling is policy._reference
    assert policy.logprobs(PROMPT, COMPLETION) == [
        encoded_logprob(i, "reference") for i in (5, 6, 7)
    ]
    assert policy._training is None


def test_from_settings_replaces_the_embedded_model(tmp_path: Path) -> None:
    settings = Settings(backend="tinker", adapters_dir=str(tmp_path), lora_rank=8, kl_coef=0.2)
    policy = TinkerPolicy.from_settings(settings, connect=False)
    assert policy.model_name == DEFAULT_TINKER_MODEL
    assert policy.rank == 8 and policy.kl_coef == 0.2 and policy.adapters_dir == tmp_path
    settings = Settings(backend="tinker", model="meta-llama/Llama-3.1-8B-Instruct")
    assert (
        TinkerPolicy.from_settings(settings, connect=False).model_name
        == "meta-llama/Llama-3.1-8B-Instruct"
    )


# -- failure behaviour with the SDK's own clients --------------------------------------------


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.delenv("TINKER_CREDENTIAL_CMD", raising=False)
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.tinker/credentials.json


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_missing_key_is_backend_unavailable(no_credentials: None) -> None:
    start = time.monotonic()
    with pytest.raises(BackendUnavailable, match="TINKER_API_KEY"):
        TinkerPolicy(base_url=f"http://127.0.0.1:{closed_port()}", connect_timeout_s=2)
    assert time.monotonic() - start < 5


def test_malformed_key_is_backend_unavailable(no_credentials: None) -> None:
    with pytest.raises(BackendUnavailable, match="tml-"):
        TinkerPolicy(
            api_key="not-a-key", base_url=f"http://127.0.0.1:{closed_port()}", connect_timeout_s=2
        )


def test_unreachable_service_is_backend_unavailable(no_credentials: None) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    start = time.monotonic()
    with pytest.raises(BackendUnavailable, match="cannot reach the Tinker service") as info:
        TinkerPolicy(api_key="tml-test-key", base_url=url, connect_timeout_s=2)
    assert url in str(info.value)
    assert time.monotonic() - start < 5


class _Handler(http.server.BaseHTTPRequestHandler):
    mode = "hang"

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        if self.path.endswith("/healthz") and self.mode == "hang":
            body = b'{"status": "ok"}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.mode == "hang":
            time.sleep(20)  # a service that accepted the connection and never answers
        else:
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

    do_GET = do_POST = _answer


@pytest.fixture
def local_server(request: pytest.FixtureRequest) -> Iterator[str]:
    handler = type("Handler", (_Handler,), {"mode": request.param})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("local_server", ["hang"], indirect=True)
def test_service_that_never_answers_hits_the_deadline(
    no_credentials: None, local_server: str
) -> None:
    """The SDK retries for minutes; our deadline turns that into a quick, clear error."""
    start = time.monotonic()
    with pytest.raises(BackendUnavailable, match="did not answer in time"):
        TinkerPolicy(
            api_key="tml-test-key", base_url=local_server, connect_timeout_s=2, request_timeout_s=2
        )
    assert time.monotonic() - start < 8


@pytest.mark.parametrize("local_server", ["notfound"], indirect=True)
def test_server_that_is_not_tinker(no_credentials: None, local_server: str) -> None:
    with pytest.raises(BackendUnavailable, match="not as a Tinker service"):
        TinkerPolicy(api_key="tml-test-key", base_url=local_server, connect_timeout_s=2)


def test_connection_lost_mid_session(policy: TinkerPolicy) -> None:
    import httpx

    error = tinker.APIConnectionError(
        request=httpx.Request("POST", "http://127.0.0.1:9/api/v1/asample")
    )

    class Broken(FakeSamplingClient):
        def sample(self, prompt: Any, num_samples: int, sampling_params: Any) -> FakeFuture:
            return FakeFuture(self.events, "sample", error=error)

    policy._sampling = Broken(Events())
    with pytest.raises(BackendUnavailable, match="cannot reach"):
        policy.sample(PROMPT, SampleParams(temperature=1.0))


def test_request_deadline(policy: TinkerPolicy) -> None:
    class Slow(FakeSamplingClient):
        def compute_logprobs(self, prompt: Any, prompt_logprobs_last_n: int | None = None) -> Any:
            return HangingFuture()

    policy._sampling = Slow(Events())
    policy.request_timeout_s = 0.5
    start = time.monotonic()
    with pytest.raises(BackendUnavailable, match="did not answer in time"):
        policy.logprobs(PROMPT, COMPLETION)
    assert time.monotonic() - start < 3


# -- learning/sdpo.py on this backend ---------------------------------------------------------


def test_sdpo_step_runs_on_the_tinker_backend(
    events: Events, tmp_path: Path, chatml_renderer: Any
) -> None:
    """The shared SDPO code (teacher prompt, advantages, datums) drives this backend."""
    from continual_lsp.learning import sdpo

    policy = fake_tinker_policy(chatml_renderer, tmp_path)
    sampler = policy._sampling
    job = edit_job(chatml_renderer)
    prompt, denied = job.prompt_tokens, job.tokens
    edited = job.demonstration_call()
    settings = Settings(backend="tinker", kl_coef=0.05)
    metrics = sdpo.sdpo_step(policy, job, settings)

    data, loss_fn, _ = policy._training.forward_backward_calls[0]
    assert loss_fn == "cispo" and len(data) == 2
    assert data[0].model_input.to_ints() == (prompt + denied)[:-1]
    assert data[0].loss_fn_inputs["logprobs"].tolist()[len(prompt) - 1 :] == pytest.approx(
        [-0.7] * len(denied)
    )
    demo = chatml_renderer.render_call(edited)
    assert data[1].loss_fn_inputs["target_tokens"].tolist()[-len(demo) :] == demo
    # The teacher (current weights) scored both targets in a context holding the correction.
    scored = [ids for ids, _ in sampler.calls]
    with_correction = [ids for ids in scored if EDIT_CORRECTION in chatml_renderer.decode(ids)]
    assert len(with_correction) == 2  # teacher scores of the denied call and of the demonstration
    assert all(ids[: len(prompt) - 3] == prompt[:-3] for ids in with_correction)  # same prefix
    assert metrics.tokens == len(denied) + len(demo)
    assert policy._sampling is not sampler  # the retry samples from the new weights


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("APIConnectionError", "cannot reach the Tinker service at https://t while training"),
        ("AuthenticationError", "rejected the API key while training: check TINKER_API_KEY"),
        ("PermissionDeniedError", "rejected the API key while training"),
        ("BillingError", "refused the request for billing reasons while training"),
        ("RateLimitError", "overloaded or failing while training"),
        ("InternalServerError", "overloaded or failing while training"),
    ],
)
def test_a_service_failure_tells_the_reviewer_what_happened(kind: str, says: str) -> None:
    import tinker

    cls = getattr(tinker, kind)
    exc = cls.__new__(cls)  # the SDK's constructors want an HTTP request and response
    exc.args = ("boom",)
    unavailable = as_unavailable(exc, "training", "https://t")
    assert unavailable is not None and says in str(unavailable) and "boom" in str(unavailable)


def test_a_timeout_stays_queued_and_a_bug_is_not_unavailability() -> None:
    timed_out = as_unavailable(TimeoutError(), "training", "https://t")
    assert timed_out is not None and "the step stays queued" in str(timed_out)
    assert as_unavailable(ValueError("a bug"), "training", "https://t") is None
