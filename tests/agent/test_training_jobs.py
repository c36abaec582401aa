"""The sampler side of learning: which adapter version is served, when not to trust one, and
how a wait for a step ends."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from continual_lsp.agent.training_jobs import TrainingJobs
from continual_lsp.config import Settings
from continual_lsp.policy import adapter_registry
from continual_lsp.store import Store

pytestmark = pytest.mark.model


def _register(store: Store, info: Any, parent: int | None) -> int:
    return store.add_adapter(info.name, info.path, info.sha256, parent, {"loss": 0.0})


def test_a_corrupt_adapter_is_skipped_for_the_previous_version(
    tmp_path: Path, store: Store, model_and_tokenizer: tuple[Any, Any]
) -> None:
    from continual_lsp.policy.local.local_policy import LocalPolicy

    settings = Settings(adapters_dir=str(tmp_path / "adapters"))
    policy = LocalPolicy(settings, model_and_tokenizer)
    prompt = policy.renderer.render_prompt([])
    completion = policy.renderer.tokenize('{"tool":"read"')
    v1 = _register(store, policy.save_adapter("v0001"), None)
    base = policy.logprobs(prompt, completion)
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.add_(0.01)
    info2 = policy.save_adapter("v0002")
    _register(store, info2, v1)
    changed = policy.logprobs(prompt, completion)
    assert changed != base

    jobs = TrainingJobs(store, settings)
    jobs.sync_sampler(policy)
    assert policy.logprobs(prompt, completion) == changed  # v2 intact: served

    file = Path(info2.path) / adapter_registry.ADAPTER_FILE
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])  # truncated on disk
    jobs._loaded = None  # as after a restart
    jobs.sync_sampler(policy)
    assert policy.logprobs(prompt, completion) == base  # v1 served instead
    assert jobs.current_version_name() == f"adapter-{v1}"
    events = store.events(kind="adapter_corrupt")
    assert len(events) == 1 and "sha256" in events[0]["payload"]["problem"]


def test_reverting_every_version_serves_the_base_model(
    tmp_path: Path, store: Store, model_and_tokenizer: tuple[Any, Any]
) -> None:
    from continual_lsp.policy.local.local_policy import LocalPolicy

    settings = Settings(adapters_dir=str(tmp_path / "adapters"))
    policy = LocalPolicy(settings, model_and_tokenizer)
    prompt = policy.renderer.render_prompt([])
    completion = policy.renderer.tokenize('{"tool":"glob"')
    base = policy.logprobs(prompt, completion)
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.add_(0.01)
    v1 = _register(store, policy.save_adapter("v0001"), None)
    jobs = TrainingJobs(store, settings)
    jobs.sync_sampler(policy)
    assert policy.logprobs(prompt, completion) != base
    jobs.revert_adapter(v1, policy)
    assert jobs.current_version_name() is None
    assert policy.logprobs(prompt, completion) == base


class _BusyWorker:
    """A worker whose job never finishes (a long step)."""

    alive = True

    def wait_job(self, job_id: int, timeout: float | None = None) -> dict[str, Any]:
        time.sleep(timeout or 0.0)
        raise TimeoutError(f"job {job_id} still running")

    def stop(self) -> None:
        pass


class _Progress:
    def __init__(self) -> None:
        self.messages: list[tuple[str, bool]] = []
        self.ends: list[str] = []

    def on_progress(
        self, token: str, title: str, message: str, percentage: int | None, done: bool
    ) -> None:
        self.messages.append((message, done))
        if done:
            self.ends.append(message)


class _Worker:
    """Stands in for the worker process: answers every wait with a finished step."""

    alive = ready = True

    def __init__(self) -> None:
        self.waited: list[int] = []

    def notify(self) -> None:
        pass

    def wait_job(self, job_id: int, timeout: float) -> dict[str, Any]:
        self.waited.append(job_id)
        return {"step": 1, "loss": 0.5, "seconds": 0.1}


def test_past_the_queue_limit_the_retry_stops_waiting_and_the_job_stays(store: Store) -> None:
    jobs = TrainingJobs(store, Settings(max_queued_jobs=2))
    worker = jobs._worker = _Worker()
    ids = [store.enqueue_job("sdpo", {"proposal_id": f"p{i}"}) for i in range(2)]
    progress = _Progress()
    note = jobs.wait(ids[-1], "p1", progress, None)
    assert note is not None and worker.waited == [ids[-1]]  # within the limit: waited
    third = store.enqueue_job("sdpo", {"proposal_id": "p2"})
    progress = _Progress()
    assert jobs.wait(third, "p2", progress, None) is None
    assert worker.waited == [ids[-1]]  # not waited for
    message, done = progress.messages[-1]
    assert done and "3 corrections are waiting" in message and "max_queued_jobs = 2" in message
    assert store.queue_depth(("sdpo",)) == 3  # nothing dropped: every job still queued


def test_with_shared_training_every_user_gets_a_seat_in_one_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from continual_lsp.learning import team_worker

    monkeypatch.setattr(team_worker, "_team", None)
    monkeypatch.setattr(team_worker.TeamTrainer, "ensure_running", lambda self: None)
    seats = []
    for name in ("alice", "bob"):
        settings = Settings(user=name, shared_training=True)
        store = Store(tmp_path / f"{name}.sqlite3")
        seats.append(TrainingJobs(store, settings)._ensure_worker())
        store.close()
    assert all(isinstance(s, team_worker.TeamSeat) for s in seats)
    assert seats[0].team is seats[1].team
    assert set(seats[0].team._members) == {str(tmp_path / f"{n}.sqlite3") for n in ("alice", "bob")}


def test_stopping_ends_a_wait_for_a_step_still_running(tmp_path: Path, store: Store) -> None:
    """A denial's step is waited for on a thread of its own: closing the session must not
    leave that thread waiting (or restart the worker it stopped)."""
    jobs = TrainingJobs(store, Settings(adapters_dir=str(tmp_path / "adapters")))
    busy = _BusyWorker()
    jobs._worker = busy
    progress = _Progress()
    result: list[Any] = []
    waiter = threading.Thread(target=lambda: result.append(jobs.wait(1, "p", progress, None)))
    waiter.start()
    waiter.join(1.5)
    assert waiter.is_alive(), "the step is still running: the wait goes on"
    jobs.stop()
    waiter.join(5)
    assert not waiter.is_alive() and result == [None]
    assert progress.ends == ["the session ended first"]
    assert jobs._worker is None  # no worker started again for the dead wait


class _DeadOnArrival:
    """A worker process that has always exited by the time anyone looks."""

    pid = None
    exitcode = 1

    def is_alive(self) -> bool:
        return False


def test_a_worker_that_keeps_dying_is_restarted_at_most_max_restarts_times(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait restarts a dead worker through its own restart count: past the limit the
    editor reads why, instead of the worker being respawned for the whole wait."""
    from continual_lsp.agent import training_jobs
    from continual_lsp.learning.worker import TrainingWorker

    spawned: list[int] = []

    class Dying(TrainingWorker):
        def _spawn(self) -> None:
            spawned.append(1)
            self._process = _DeadOnArrival()

    monkeypatch.setattr(training_jobs, "WAIT_SECONDS", 3.0)  # a crash loop would hit this
    settings = Settings(adapters_dir=str(tmp_path / "adapters"))
    jobs = TrainingJobs(store, settings)
    worker = Dying(settings, store.path, max_restarts=2)
    worker.start()
    jobs._worker = worker
    job = store.enqueue_job("sdpo", {"proposal_id": "p"})
    progress = _Progress()
    assert jobs.wait(job, "p", progress, None) is None
    assert len(spawned) == 3  # the first start and two restarts, no more
    assert len(progress.ends) == 1
    assert "step failed" in progress.ends[0] and "died 3 times" in progress.ends[0]
    assert store.job(job)["status"] == "pending"  # the job stays for the next session
