"""The training worker process: jobs from the store, responsiveness, crashes, parent death."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from continual_lsp.config import Settings
from continual_lsp.learning import SdpoJob, TrainingWorker
from continual_lsp.learning.worker import Signal
from continual_lsp.policy import adapter_registry
from continual_lsp.policy.local.local_policy import LocalPolicy
from continual_lsp.store import Store

from .conftest import CORRECTION, DEMO, make_situation

pytestmark = pytest.mark.model


def payload(policy: LocalPolicy, proposal_id: str) -> dict[str, Any]:
    s = make_situation(policy)
    return SdpoJob(
        proposal_id=proposal_id,
        prompt_tokens=s.prompt,
        tokens=s.denied,
        logprobs=s.denied_logprobs,
        correction=CORRECTION,
        demonstration=DEMO.model_dump(),
        signal="edit",
    ).model_dump()


def assert_only_complete_versions(directory: Path, store: Store) -> None:
    names = sorted(p.name for p in directory.iterdir())
    assert names == sorted(a["name"] for a in store.adapters())  # no partial, no stray
    for adapter in store.adapters():
        assert (
            adapter_registry.sha256_file(Path(adapter["path"]) / adapter_registry.ADAPTER_FILE)
            == adapter["sha256"]
        )


def test_worker_trains_replays_a_killed_job_and_keeps_the_loop_responsive(
    policy: LocalPolicy, tmp_path: Path
) -> None:
    store_path = tmp_path / "store.sqlite3"
    settings = Settings(store_path=str(store_path), adapters_dir=str(tmp_path / "adapters"))
    store = Store(store_path)
    worker = TrainingWorker(settings, store_path, poll_s=0.5)
    try:
        worker.start()
        assert worker.wait_ready(300), "worker did not load its model"
        first = store.enqueue_job("sdpo", payload(policy, "prop-1"))

        async def ping_while_training() -> tuple[dict[str, Any], list[float]]:
            lags: list[float] = []
            task = asyncio.create_task(worker.wait_job_async(first, timeout=600))
            worker.notify()
            while not task.done():
                start = time.perf_counter()
                await asyncio.sleep(0.005)  # a ping the loop must answer promptly
                lag = time.perf_counter() - start - 0.005
                if store.job(first)["status"] == "running":
                    lags.append(lag)
            return await task, lags

        result, lags = asyncio.run(ping_while_training())
        assert result["adapterVersion"] == 1 and result["name"] == "v0001"
        assert result["loss"] is not None and result["seconds"] > 0
        assert len(lags) > 20
        lags.sort()
        p99 = lags[int(0.99 * (len(lags) - 1))]
        assert p99 < 0.050, f"event loop p99 lag {p99 * 1000:.1f} ms while the worker trained"
        adapter = store.current_adapter()
        assert adapter["metrics"]["jobId"] == first and "meanAdvantage" in adapter["metrics"]

        # SIGKILL mid-step: the job stays 'running', a restarted worker replays it.
        second = store.enqueue_job("sdpo", payload(policy, "prop-2"))
        worker.notify()
        deadline = time.monotonic() + 120
        while store.job(second)["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)
        old_pid = worker.pid
        worker.kill()
        assert not worker.alive and store.job(second)["status"] == "running"
        assert_only_complete_versions(Path(settings.adapters_dir or ""), store)
        result = worker.wait_job(second, timeout=600)  # restarts the dead worker
        assert worker.pid != old_pid and worker.restarts == 1
        job = store.job(second)
        assert job["status"] == "done" and job["attempts"] == 2
        assert result["name"] == "v0002"
        # The restarted worker continued from v0001 (the store's active adapter).
        assert store.adapters()[-1]["parent"] == 1
        assert_only_complete_versions(Path(settings.adapters_dir or ""), store)
        # The parent loads the new version into its sampler; it matches the saved file.
        policy.load_adapter(result["path"])
        assert policy.adapter_version == "v0002"
    finally:
        worker.stop()
        store.close()
    assert not worker.alive


def test_worker_dies_with_its_parent(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, time
        from continual_lsp.config import Settings
        from continual_lsp.learning.worker import TrainingWorker
        w = TrainingWorker(Settings(store_path={str(tmp_path / "s.sqlite3")!r}), {str(tmp_path / "s.sqlite3")!r})
        w.start()
        print(w.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())  # type: ignore[union-attr]
        time.sleep(8)  # let the child get past its imports and the prctl
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 20
        while _running(child):
            assert time.monotonic() < deadline, "the worker outlived its parent"
            time.sleep(0.2)
    finally:
        if parent.poll() is None:
            parent.kill()


def test_the_worker_outlives_the_thread_that_started_it(tmp_path: Path) -> None:
    """The agent starts the worker from whichever thread first needs it; that thread
    ending must neither kill the worker nor hang the `stop` that follows (a killed
    waiter on a multiprocessing.Event hangs every later `set`)."""
    store_path = str(tmp_path / "s.sqlite3")
    worker = TrainingWorker(Settings(store_path=store_path), store_path, poll_s=30.0)
    starter = threading.Thread(target=lambda: (worker.start(), worker.wait_ready(120)))
    starter.start()
    starter.join(130)
    try:
        assert worker.ready, "the worker never loaded its model"
        time.sleep(1.5)  # now asleep on its wake signal, the thread that spawned it gone
        assert worker.alive, "the worker died with the thread that started it"
    finally:
        stopper = threading.Thread(target=worker.stop, daemon=True)
        stopper.start()
        stopper.join(30)
    assert not stopper.is_alive(), "stop() hung"
    assert not worker.alive


def test_a_waiter_killed_mid_wait_does_not_hang_set() -> None:
    ctx = mp.get_context("spawn")
    flag = Signal(ctx)
    sleeper = ctx.Process(target=flag.wait, args=(600.0,), daemon=True)
    sleeper.start()
    time.sleep(1.0)  # asleep inside wait
    sleeper.kill()
    sleeper.join(5)
    setter = threading.Thread(target=flag.set, daemon=True)
    setter.start()
    setter.join(5)
    assert not setter.is_alive(), "set() waited for a dead waiter"
    assert flag.is_set() and flag.wait(0)
    flag.clear()
    assert not flag.is_set() and not flag.wait(0.05)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_revert_is_honoured_by_the_next_step(policy: LocalPolicy, tmp_path: Path) -> None:
    """In process (run_job): after v2 is reverted, the next version builds on v1."""
    from continual_lsp.learning.worker import run_job

    store = Store(tmp_path / "store.sqlite3")
    settings = Settings(adapters_dir=str(tmp_path / "adapters"))
    directory = tmp_path / "adapters"
    try:
        for n in (1, 2):
            job_id = store.enqueue_job("sdpo", payload(policy, f"prop-{n}"))
            job = store.claim_job(("sdpo",))
            assert job is not None and job["id"] == job_id
            store.finish_job(job_id, run_job(policy, store, directory, settings, job))
        store.set_adapter_active(2, False)  # the reviewer reverts v2
        job_id = store.enqueue_job("sdpo", payload(policy, "prop-3"))
        job = store.claim_job(("sdpo",))
        result = run_job(policy, store, directory, settings, job)
        assert result["name"] == "v0003"
        assert store.adapters()[-1]["parent"] == 1
        assert [a["step"] for a in (store.adapters()[i]["metrics"] for i in range(3))] == [1, 2, 3]
        assert_only_complete_versions(directory, store)
    finally:
        store.close()
