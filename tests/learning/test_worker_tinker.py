"""The training worker's job path on the Tinker backend, with the service faked (it cannot
be reached from here): a step saves a remote version the store records, a revert moves
the worker back to the base weights, and an unreachable service puts the job back in the
queue instead of failing it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

tinker = pytest.importorskip("tinker")

from continual_lsp.config import Settings  # noqa: E402
from continual_lsp.learning.worker import JOB_KINDS, handle_job, sync_weights  # noqa: E402
from continual_lsp.store import Store  # noqa: E402
from tests.policy.tinker.tinker_fakes import (  # noqa: E402
    Events,
    FakeFuture,
    FakeTrainingClient,
    edit_job,
    fake_tinker_policy,
)


class UnreachableTraining(FakeTrainingClient):
    """A training client whose connection drops on every forward_backward."""

    def forward_backward(self, data: Any, loss_fn: str, loss_fn_config: Any = None) -> Any:
        error = tinker.APIConnectionError(
            request=httpx.Request("POST", "http://127.0.0.1:9/api/v1/forward_backward")
        )
        return FakeFuture(self.events, "forward_backward", error=error)


@pytest.fixture
def store(tmp_path: Path) -> Any:
    opened = Store(tmp_path / "store.db")
    yield opened
    opened.close()


def test_step_saves_a_remote_version_and_revert_returns_to_base(
    tmp_path: Path, store: Store, chatml_renderer: Any
) -> None:
    policy = fake_tinker_policy(chatml_renderer, tmp_path / "adapters")
    settings = Settings(backend="tinker")
    job_id = store.enqueue_job("sdpo", edit_job(chatml_renderer).model_dump())

    handle_job(policy, store, tmp_path / "adapters", settings, store.claim_job(JOB_KINDS))

    job = store.job(job_id)
    assert job is not None and job["status"] == "done", job
    assert job["result"]["name"] == "v0001" and job["result"]["adapterVersion"] == 1
    assert job["result"]["path"] == "tinker://run-1/weights/v0001"
    (adapter,) = store.adapters()
    assert adapter["path"] == job["result"]["path"] and len(adapter["sha256"]) == 64
    assert adapter["metrics"]["jobId"] == job_id
    assert policy.adapter_version == "v0001"

    # The reviewer reverts the only version: the next job must build on the base weights.
    store.set_adapter_active(1, False)
    sync_weights(policy, store)
    assert policy.adapter_version is None and policy._sampling is policy._reference

    # Re-activated: the worker loads it back through the service, by the recorded path.
    store.set_adapter_active(1, True)
    sync_weights(policy, store)
    assert policy.adapter_version == "v0001"
    assert policy._service.loaded[-1] == "tinker://run-1/sampler_weights/v0001"


def test_unreachable_service_requeues_the_job_with_backoff(
    tmp_path: Path, store: Store, chatml_renderer: Any
) -> None:
    policy = fake_tinker_policy(
        chatml_renderer, tmp_path / "adapters", UnreachableTraining(Events())
    )
    settings = Settings(backend="tinker")
    job_id = store.enqueue_job("sdpo", edit_job(chatml_renderer).model_dump())
    waits: list[float] = []

    for _ in range(2):
        handle_job(
            policy, store, tmp_path / "adapters", settings, store.claim_job(JOB_KINDS), waits.append
        )
        job = store.job(job_id)
        assert job is not None and job["status"] == "pending", job
        assert "cannot reach" in job["error"]
    assert waits == [10.0, 20.0]  # 5 s · 2^attempts, growing with each failed attempt
    assert store.adapters() == []

    # The service is back: the same job (the reviewer's decision) trains and finishes.
    policy._training = FakeTrainingClient(Events())
    handle_job(policy, store, tmp_path / "adapters", settings, store.claim_job(JOB_KINDS))
    job = store.job(job_id)
    assert job is not None and job["status"] == "done" and job["attempts"] == 3
    assert [a["name"] for a in store.adapters()] == ["v0001"]
