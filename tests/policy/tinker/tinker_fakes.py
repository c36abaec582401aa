"""Fakes of the Tinker service built on the SDK's real `types`: a recording training
client, sampling clients whose logprobs encode their input position (so an off-by-one
shows), and a service client. Shared by the backend tests and the worker's."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

import tinker


class Events(list[str]):
    """Shared, ordered record of what the fakes were asked to do and when they were awaited."""


class FakeFuture:
    """An APIFuture stand-in that records when its result is awaited."""

    def __init__(
        self, events: Events, label: str, value: Any = None, error: BaseException | None = None
    ):
        self.events, self.label, self.value, self.error = events, label, value, error

    def result(self, timeout: float | None = None) -> Any:
        self.events.append(f"wait:{self.label}")
        if self.error is not None:
            raise self.error
        return self.value


class HangingFuture:
    def result(self, timeout: float | None = None) -> Any:
        time.sleep(timeout if timeout is not None else 3600)
        raise concurrent.futures.TimeoutError()


def encoded_logprob(position: int, weights: str = "current") -> float:
    """A logprob whose value names its input position (and the weights that produced it)."""
    base = {"current": -0.001, "reference": -0.002, "step1": -0.003}[weights]
    return base * position - 0.25


class FakeSamplingClient:
    def __init__(
        self, events: Events, weights: str = "current", completion: list[int] | None = None
    ):
        self.events = events
        self.weights = weights
        self.completion = completion or [7, 8, 9, 2]
        self.calls: list[tuple[list[int], int | None]] = []

    def compute_logprobs(
        self, prompt: Any, prompt_logprobs_last_n: int | None = None
    ) -> FakeFuture:
        ids = prompt.to_ints()
        self.calls.append((ids, prompt_logprobs_last_n))
        self.events.append(f"compute_logprobs:{self.weights}")
        # Entry i = logprob of token i given tokens < i; entry 0 is None (Tinker's contract).
        values: list[float | None] = [None] + [
            encoded_logprob(i, self.weights) for i in range(1, len(ids))
        ]
        if prompt_logprobs_last_n is not None:
            values = [None] * (len(ids) - prompt_logprobs_last_n) + values[
                len(ids) - prompt_logprobs_last_n :
            ]
        return FakeFuture(self.events, f"compute_logprobs:{self.weights}", values)

    def sample(self, prompt: Any, num_samples: int, sampling_params: Any) -> FakeFuture:
        self.events.append(f"sample:{self.weights}")
        self.last_params = sampling_params
        sequences = [
            tinker.types.SampledSequence(
                stop_reason="stop",
                sequence_id=f"seq-{i + 1}",
                _tokens_list=list(self.completion),
                _logprobs_list=[-0.5] * len(self.completion),
            )
            for i in range(num_samples)
        ]
        return FakeFuture(self.events, "sample", tinker.types.SampleResponse(sequences=sequences))


class FakeTrainingClient:
    """Records forward_backward datums (tinker.Datum) and optimizer calls."""

    def __init__(self, events: Events):
        self.events = events
        self.forward_backward_calls: list[tuple[list[Any], str, Any]] = []
        self.optim_calls: list[Any] = []
        self.saved: list[str] = []

    def forward_backward(
        self, data: list[Any], loss_fn: str, loss_fn_config: Any = None
    ) -> FakeFuture:
        self.events.append("forward_backward")
        self.forward_backward_calls.append((data, loss_fn, loss_fn_config))
        outputs = []
        for datum in data:
            n = datum.model_input.length
            # Learner logprob of target token i = logprob of input token i+1.
            values = [encoded_logprob(i + 1) for i in range(n)]
            outputs.append({"logprobs": tinker.TensorData(data=values, dtype="float32", shape=[n])})
        value = tinker.types.ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs, metrics={"loss:sum": 0.0}
        )
        return FakeFuture(self.events, "forward_backward", value)

    def optim_step(self, params: Any) -> FakeFuture:
        self.events.append("optim_step")
        self.optim_calls.append(params)
        return FakeFuture(self.events, "optim_step", None)

    def save_weights_and_get_sampling_client(self) -> FakeFuture:
        self.events.append("save_weights_and_get_sampling_client")
        return FakeFuture(self.events, "new_sampler", FakeSamplingClient(self.events, "step1"))

    def save_state(self, name: str) -> FakeFuture:
        self.saved.append(name)
        return FakeFuture(
            self.events,
            "save_state",
            tinker.types.SaveWeightsResponse(path=f"tinker://run-1/weights/{name}"),
        )

    def save_weights_for_sampler(self, name: str) -> FakeFuture:
        response = tinker.types.SaveWeightsForSamplerResponse(
            path=f"tinker://run-1/sampler_weights/{name}"
        )
        return FakeFuture(self.events, "save_sampler", response)


class FakeService:
    def __init__(self, events: Events):
        self.events = events
        self.loaded: list[str] = []

    def create_training_client_from_state_with_optimizer(self, path: str) -> FakeFuture:
        self.loaded.append(path)
        return FakeFuture(self.events, "load", FakeTrainingClient(self.events))

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> FakeFuture:
        self.loaded.append(str(model_path))
        return FakeFuture(self.events, "sampler", FakeSamplingClient(self.events, "step1"))


class StubRenderer:
    tokenizer = None

    def stop(self) -> list[int]:
        return [2]

    def decode(self, tokens: list[int]) -> str:
        return " ".join(map(str, tokens))

    def render_prompt(self, messages: Any) -> list[int]:
        raise NotImplementedError

    def render_call(self, call: Any) -> list[int]:
        raise NotImplementedError

    def parse_call(self, text: str) -> Any:
        raise NotImplementedError


def fake_tinker_policy(
    renderer: Any, adapters_dir: Any, training: FakeTrainingClient | None = None
) -> Any:
    """A TinkerPolicy wired to the fakes (`training` replaces the training client)."""
    from continual_lsp.policy.tinker.tinker_policy import TinkerPolicy

    events = training.events if training is not None else Events()
    return TinkerPolicy(
        service_client=FakeService(events),
        training_client=training if training is not None else FakeTrainingClient(events),
        sampling_client=FakeSamplingClient(events, "current"),
        reference_client=FakeSamplingClient(events, "reference"),
        renderer=renderer,
        adapters_dir=adapters_dir,
        connect=False,
    )


EDIT_CORRECTION = "edit the line, do not rewrite the file"


def edit_job(renderer: Any) -> Any:
    """A reviewer's edit: `write` a.py replaced by `edit_lines` on its first line."""
    from continual_lsp.learning.sdpo import SdpoJob
    from continual_lsp.policy.base import Message
    from continual_lsp.tools.base import ToolCall

    prompt = renderer.render_prompt([Message(role="user", content="Task: fix the test")])
    denied = renderer.render_call(
        ToolCall(tool="write", arguments={"path": "a.py", "content": "x"})
    )
    edited = ToolCall(
        tool="edit_lines", arguments={"path": "a.py", "start": 1, "end": 1, "content": "x = 2\n"}
    )
    return SdpoJob(
        proposal_id="p1",
        prompt_tokens=prompt,
        tokens=denied,
        logprobs=[-0.7] * len(denied),
        correction=EDIT_CORRECTION,
        demonstration=edited.model_dump(),
        signal="edit",
    )
