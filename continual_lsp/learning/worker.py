"""The training worker: its own process, fed from the store's job queue (DESIGN §2, §4).

Why a process: a step takes seconds of CPU; in the server's process it would stall the
LSP event loop (and the GIL). Why **spawn**, never fork: the server holds threads (pygls,
executors) and a forked child can deadlock on a lock one of them held at fork time
(FIELD-NOTES: a fork pool deadlocks under stdio).

Child process (`worker_main`):

- first thing, points fd 1 at fd 2 (stdout may be the LSP stdio channel: one stray byte
  breaks the framing) and fd 0 at /dev/null; exits when its parent dies (a thread watches
  the parent pid; not `PR_SET_PDEATHSIG`, which fires when the *thread* that spawned the
  worker ends, and the agent spawns it from whichever thread first needs it); lowers its
  own priority (`os.nice`) so the server and the sampler stay responsive while it trains;
- loads the model and the store's current active adapter (so it continues from the
  weights the reviewer is using; re-checked before every job, so a revert is honoured:
  `sync_weights`), removes `.partial-*` leftovers of a save that died;
- loops: `store.claim_job(("sdpo",))` (a job left `running` by a crash comes back first,
  so it is replayed) → `sdpo_step` → `save_adapter` as the next version `v0001, v0002…`
  under the adapters directory, atomically → `store.add_adapter(...)` with the metrics →
  `store.finish_job(job, {adapterVersion, name, path, sha256, step, loss, kl, seconds})`
  (every key always present; `step`, `loss`, `kl`, `seconds` are numbers; a job with
  nothing to learn finishes with `skipped` set and the current version).
  When the queue is empty it sleeps on the wake signal (`TrainingWorker.notify()`), with a
  poll every `poll_s` seconds as a fallback (a job enqueued by another process).

Crash safety: the adapter directory only ever holds complete versions (atomic rename);
a crash between the save and `add_adapter` leaves an unregistered directory, which the
replay overwrites (`_save_version`); a crash after `add_adapter` but before `finish_job`
is detected on replay by the job id recorded in the adapter's metrics, and the job is
finished with that version instead of training twice.

Parent side (`TrainingWorker`): `start()`, `notify()`, `wait_job()` (blocking, for a
thread) / `wait_job_async()` (asyncio), `alive`, `ensure_running()` (restarts a dead
worker; the running job it held is replayed), `stop()`. The agent loads the new version
into its sampling policy with `policy.load_adapter(result["path"])` once `wait_job`
returns.

Over 500 lines on purpose: both sides of one process boundary (the spawned child and the
parent's handle) share the signals, the job results and the crash-replay rules above,
which are kept honest by reading them together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from continual_lsp.config import Settings
from continual_lsp.learning import sdpo
from continual_lsp.learning.anchors import anchor_datums, skill_cost
from continual_lsp.learning.consolidate import run_consolidation_job
from continual_lsp.policy.adapter_registry import AdapterRegistry, adapters_dir, version_name
from continual_lsp.policy.base import BackendUnavailable, Datum, Policy, TrainMetrics
from continual_lsp.policy.factory import make_trainer
from continual_lsp.policy.local import adapter_files
from continual_lsp.store.db import Store

log = logging.getLogger(__name__)

JOB_KINDS = ("sdpo", "consolidate")
STEP_COUNTER = "sdpo_steps"  # store counter: SDPO steps taken, across worker restarts


class WorkerError(RuntimeError):
    """The worker failed a job, or could not be kept running; the message says why."""


class Signal:
    """A flag shared with a spawned process: `set`, `clear`, `is_set`, `wait(timeout)`.

    Not `multiprocessing.Event`: its `set` waits until every sleeper has acknowledged,
    so a waiter killed mid-wait (SIGKILL, the OOM killer, `os._exit` from another thread)
    hangs every later `set` for good, and the server with it. A semaphore post never
    waits for anyone; the flag itself is one shared byte.
    """

    def __init__(self, ctx: Any) -> None:
        self._flag = ctx.Value("b", 0, lock=False)
        self._bell = ctx.Semaphore(0)

    def set(self) -> None:
        self._flag.value = 1
        self._bell.release()

    def clear(self) -> None:
        self._flag.value = 0
        while self._bell.acquire(False):
            pass

    def is_set(self) -> bool:
        return bool(self._flag.value)

    def wait(self, timeout: float | None = None) -> bool:
        """True once set (at once if it is); False after `timeout` seconds."""
        if self.is_set():
            return True
        if self._bell.acquire(True, timeout) and self.is_set():
            self._bell.release()  # the next waiter wakes too; `clear` takes it back
        return self.is_set()


@dataclass(frozen=True)
class WorkerLink:
    """What a spawned worker gets from its parent besides its job source: the parent's pid
    (the worker dies with it), the three signals, and its poll interval and niceness."""

    parent_pid: int
    wake: Signal
    stop: Signal
    ready: Signal
    poll_s: float
    nice: int


# -- child side -------------------------------------------------------------------------------


def _isolate_stdio() -> None:
    """fd 1 → fd 2 and fd 0 → /dev/null, at the OS level, before anything can print."""
    with contextlib.suppress(OSError):
        sys.stdout.flush()
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = sys.stderr


def _watch_parent(parent_pid: int, stop: Signal) -> None:
    """Exit when the parent process is gone (checked now, then every second)."""
    if os.getppid() != parent_pid:
        os._exit(0)

    def watch() -> None:
        while not stop.wait(1.0):
            if os.getppid() != parent_pid:
                os._exit(0)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _load_policy(settings: Settings, store: Store) -> Policy:
    """The configured trainer at the store's current weights (`sync_weights`): the sampling
    backend itself, or for a vLLM sampler the backend that trains for it."""
    policy = make_trainer(settings)
    sync_weights(policy, store)
    return policy


def _passed_over(adapter: dict[str, Any], problem: str) -> None:
    log.error("adapter %s is unusable (%s); trying the one before", adapter["name"], problem)


def sync_weights(policy: Policy, store: Store) -> None:
    """Make the worker's weights the registry's newest intact adapter (the sampler's).

    Called at start and before every job: the reviewer may have reverted a version
    (`set_adapter_active(v, False)`) or consolidation may have added one since the last
    step, and the next step must build on what the sampler serves, not on the worker's
    in-memory weights. A damaged version is passed over with an error in the log (the
    agent sets it aside), so the worker does not crash-loop on it.
    """
    registry = AdapterRegistry(store)
    adapter = registry.newest_intact(policy, _passed_over, served=policy.adapter_version)
    if adapter is None:
        if policy.adapter_version is not None:
            registry.serve(policy, None)
            log.info("worker continues from the base model")
    elif adapter["name"] != policy.adapter_version:
        registry.serve(policy, adapter)
        log.info("worker continues from adapter %s (v%s)", adapter["name"], adapter["version"])


def _save_version(
    policy: Policy,
    store: Store,
    directory: Path,
    job: dict[str, Any],
    metrics: TrainMetrics,
    step: int,
) -> dict[str, Any]:
    """Save the adapter as the next version, register it, return the job's result."""
    import shutil

    known = store.adapters()
    version = (max((a["version"] for a in known), default=0)) + 1
    name = version_name(version)
    target = directory / name
    if target.exists() and not any(a["name"] == name for a in known):
        # Left by a crash between the save and add_adapter; this replay supersedes it.
        # Renamed away first (atomic) so a kill mid-delete never leaves a half version.
        doomed = directory / f"{adapter_files.PARTIAL_PREFIX}stale-{name}"
        os.replace(target, doomed)
        shutil.rmtree(doomed)
    parent = next((a["version"] for a in known if a["name"] == policy.adapter_version), None)
    if policy.manages_versions:
        info = policy.save_adapter(name)
    else:
        info = adapter_files.save_adapter(policy, name, directory)
        policy.adapter_version = name  # type: ignore[misc]  # settable where not managed
    recorded = {
        "loss": metrics.loss,
        "kl": metrics.kl,
        "meanAdvantage": metrics.mean_advantage,
        "meanRatio": metrics.mean_ratio,
        "clippedFraction": metrics.clipped_fraction,
        "seconds": metrics.seconds,
        "tokens": metrics.tokens,
        "step": step,
        "jobId": job["id"],
        "proposalId": job["payload"].get("proposal_id"),
    }
    version = store.add_adapter(
        name,
        info.path,
        info.sha256,
        parent,
        recorded,
        source="sdpo",
    )
    served = {"version": version, "name": name, "path": info.path}
    return _result(served, step, metrics.loss, metrics.kl, metrics.seconds, sha256=info.sha256)


def _result(
    adapter: dict[str, Any] | None,
    step: float,
    loss: float,
    kl: float,
    seconds: float,
    **extra: Any,
) -> dict[str, Any]:
    """A job's result: the version the sampler should serve (None: the base model) and the
    step's numbers; every key is always present, the numbers are numbers."""
    return {
        "adapterVersion": adapter["version"] if adapter else None,
        "name": adapter["name"] if adapter else None,
        "path": adapter["path"] if adapter else None,
        "step": int(step),
        "loss": float(loss),
        "kl": float(kl),
        "seconds": float(seconds),
        **extra,
    }


def _already_done(store: Store, job: dict[str, Any]) -> dict[str, Any] | None:
    """A replayed job whose adapter was registered before the crash: reuse that version."""
    for adapter in reversed(store.adapters()):
        if adapter["metrics"].get("jobId") == job["id"]:
            m = adapter["metrics"]
            return _result(
                adapter,
                m.get("step") or 0,
                m.get("loss") or 0.0,
                m.get("kl") or 0.0,
                m.get("seconds") or 0.0,
                sha256=adapter["sha256"],
                replayed=True,
            )
    return None


def run_job(
    policy: Policy, store: Store, directory: Path, settings: Settings, job: dict[str, Any]
) -> dict[str, Any]:
    """One claimed job → one step (+ a saved version every `save_every` steps) → result."""
    done = _already_done(store, job)
    if done is not None:
        return done
    payload = sdpo.SdpoJob.model_validate(job["payload"])
    sync_weights(policy, store)
    replay = []
    if settings.replay_same_cluster and payload.cluster:
        # Twice as many as replayed: an earlier job with nothing left to learn is skipped.
        earlier = store.cluster_jobs(
            sdpo.JOB_KIND, payload.cluster, job["id"], 2 * settings.replay_same_cluster
        )
        replay = [sdpo.SdpoJob.model_validate(p) for p in earlier]
    # By the step counter, so a worker restart goes on with the next anchors in turn.
    anchors = anchor_datums(settings, int(store.counter(STEP_COUNTER)))
    try:
        metrics = sdpo.sdpo_step(policy, payload, settings, replay, anchors=anchors)
    except sdpo.NothingToLearn as exc:
        steps = store.counter(STEP_COUNTER)
        return _result(store.current_adapter(), steps, 0.0, 0.0, 0.0, skipped=str(exc))
    undone = _undo_if_costly(policy, store, settings)
    if undone is not None:
        steps = store.counter(STEP_COUNTER)
        return _result(
            store.current_adapter(), steps, metrics.loss, metrics.kl, 0.0, skipped=undone
        )
    # A store counter, not the process's own count: step numbers survive worker restarts.
    store.bump(STEP_COUNTER)
    steps = int(store.counter(STEP_COUNTER))
    if settings.save_every <= 1 or steps % settings.save_every == 0:
        return _save_version(policy, store, directory, job, metrics, steps)
    return _result(
        store.current_adapter(), steps, metrics.loss, metrics.kl, metrics.seconds, saved=False
    )


def _undo_if_costly(policy: Policy, store: Store, settings: Settings) -> str | None:
    """Undo the step just taken when it cost the starter's skills (`anchors.skill_cost`
    over `anchor_gate_nats`): the weights go back to the newest saved version (with
    `save_every` > 1, the steps since it too). Returns why, or None when it stays."""
    limit = settings.anchor_gate_nats
    if limit is None:
        return None
    started = time.perf_counter()
    cost = skill_cost(policy, settings)
    if cost is None:
        return None
    log.info("anchor gate: %+.3f nats per token in %.2fs", cost, time.perf_counter() - started)
    if cost <= limit:
        return None
    registry = AdapterRegistry(store)
    registry.serve(policy, registry.newest_intact(policy, _passed_over))
    why = (
        f"undone: the step raised the starter's held-out anchors' loss by {cost:.3f} nats "
        f"per token (anchor_gate_nats {limit})"
    )
    log.warning(why)
    return why


def handle_job(
    policy: Policy,
    store: Store,
    directory: Path,
    settings: Settings,
    job: dict[str, Any],
    backoff: Any = time.sleep,
) -> None:
    """Run one claimed job and record its outcome in the store; never raises.

    A job fails with its error, except when the backend is unreachable: then the job goes
    back to the queue (the reviewer's decision waits, it is not lost) and the worker backs
    off exponentially in its attempts (`backoff(seconds)`; the stop event's `wait` in the
    worker, so a stop request cuts the wait short).
    """
    try:
        if job["kind"] == "consolidate":
            sync_weights(policy, store)
            result = run_consolidation_job(policy, store, job, settings).model_dump()
        else:
            result = run_job(policy, store, directory, settings, job)
    except BackendUnavailable as exc:
        log.error("backend unavailable (%s); job %s stays queued", exc, job["id"])
        store.release_job(job["id"], str(exc))
        backoff(min(300.0, 5.0 * 2 ** min(job["attempts"], 6)))
        return
    except Exception as exc:
        log.error("job %s failed: %s", job["id"], traceback.format_exc())
        store.finish_job(job["id"], error=f"{type(exc).__name__}: {exc}")
        return
    store.finish_job(job["id"], result)


def warm_for_next_job(policy: Policy, job: dict[str, Any], anchors: Sequence[Datum] = ()) -> None:
    """Idle-time work after a step: the student's prompt K/V under the new weights
    (`LogitScorer.warm_prefix`; off-box, nothing), so the next correction in this task
    trains sooner, then that of the next step's `anchors` (their prompts otherwise cost
    ~0.5–1 s of each 2k-context step on 2 cores), and the prompt start's on disk for the
    server. Never raises: a failed warm-up costs only the time it would have saved."""
    scorer = policy.logit_scorer()
    if scorer is None:
        return
    try:
        scorer.warm_prefix(list(job["payload"].get("prompt_tokens") or []))
        for anchor in anchors:
            scorer.warm_prefix(anchor.prompt_tokens)
    except Exception as exc:
        log.warning("could not warm the prompt cache for the next step: %s", exc)
    keep_prompt_prefix(policy)


def keep_prompt_prefix(policy: Policy) -> None:
    """Idle-time work after a new version: the prompt start's K/V under it, on disk, so
    the server's next proposal for its user reads it back instead of prefilling it
    (policy/local/prefix_store.py; other backends: nothing). Never raises."""
    keep = getattr(policy, "keep_prompt_prefix", None)
    if callable(keep):
        try:
            keep()
        except Exception as exc:
            log.warning("could not keep the prompt start for the server: %s", exc)


def become_worker(link: WorkerLink, name: str) -> None:
    """What every spawned training worker does first: its own stdio, death with the
    parent, logs tagged `[name]` on stderr, a lower priority than the editor's server."""
    _isolate_stdio()
    _watch_parent(link.parent_pid, link.stop)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format=f"[{name}] %(message)s")
    with contextlib.suppress(OSError):
        os.nice(link.nice)


def open_adapters_dir(settings: Settings, store_path: str) -> Path:
    """The user's adapters directory, made if missing and cleared of the partial files a
    crash mid-write left (before any version in it is read)."""
    directory = adapters_dir(settings, store_path)
    directory.mkdir(parents=True, exist_ok=True)
    adapter_files.clean_partial(directory)
    return directory


def worker_main(settings_data: dict[str, Any], link: WorkerLink, store_path: str) -> None:
    """Entry point of the spawned worker process (see the module docstring)."""
    become_worker(link, "worker")
    settings = Settings.model_validate(settings_data)
    store = Store(store_path)
    directory = open_adapters_dir(settings, store_path)
    policy = _load_policy(settings, store)
    link.ready.set()
    try:
        while not link.stop.is_set():
            job = store.claim_job(JOB_KINDS)
            if job is None:
                link.wake.wait(link.poll_s)
                link.wake.clear()
                continue
            handle_job(policy, store, directory, settings, job, link.stop.wait)
            if job["kind"] == "sdpo" and store.queue_depth(JOB_KINDS) == 0:
                anchors = anchor_datums(settings, int(store.counter(STEP_COUNTER)))
                warm_for_next_job(policy, job, anchors)
    finally:
        store.close()


# -- parent side ------------------------------------------------------------------------------


class WorkerProcess:
    """A spawned training process and the three signals it shares with its parent (wake,
    stop, ready): started, restarted when it died (at most `max_restarts` times), woken and
    stopped here; what it runs is the subclass's `_spawn`."""

    label = "training worker"

    def __init__(
        self, settings: Settings, *, poll_s: float = 1.0, nice: int = 10, max_restarts: int = 5
    ) -> None:
        self.settings = settings
        self.poll_s = poll_s
        self.nice = nice
        self.max_restarts = max_restarts
        self.restarts = 0
        self._ctx = mp.get_context("spawn")
        self._wake = Signal(self._ctx)
        self._stop = Signal(self._ctx)
        self._ready = Signal(self._ctx)
        self._process: Any = None
        self._lock = threading.RLock()

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def ready(self) -> bool:
        """True once the worker has loaded its model and is taking jobs."""
        return self.alive and self._ready.is_set()

    def _spawn(self) -> None:
        """Start `self._process` (called with `_lock` held, the signals cleared)."""
        raise NotImplementedError

    def _launch(self, target: Callable[..., None], name: str, *args: Any) -> None:
        """Start `target(settings, link, *args)` as `self._process`, in a daemon process."""
        link = WorkerLink(os.getpid(), self._wake, self._stop, self._ready, self.poll_s, self.nice)
        self._process = self._ctx.Process(
            target=target,
            args=(self.settings.model_dump(), link, *args),
            name=name,
            daemon=True,
        )
        self._process.start()

    def start(self) -> None:
        """Spawn the worker (no-op if it runs). Returns at once; the model loads in the child."""
        with self._lock:
            if self.alive:
                return
            self._stop.clear()
            self._ready.clear()
            self._spawn()

    def ensure_running(self) -> None:
        """Restart a worker that died (the job it held is replayed by `claim_job`)."""
        with self._lock:
            if self.alive or self._stop.is_set():
                return
            if self._process is not None:
                if self.restarts >= self.max_restarts:
                    raise WorkerError(
                        f"the {self.label} died {self.restarts + 1} times; not restarting"
                    )
                self.restarts += 1
                log.warning("%s exited (code %s); restarting", self.label, self._process.exitcode)
            self.start()

    def notify(self) -> None:
        """A job was queued: wake the worker now instead of at its next poll."""
        self.ensure_running()
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the worker to finish its current step and exit; kill it after `timeout`."""
        with self._lock:
            self._stop.set()
            self._wake.set()
            if self._process is not None:
                self._process.join(timeout)
                if self._process.is_alive():
                    self._process.kill()
                    self._process.join(5)


class TrainingWorker(WorkerProcess):
    """Handle on the worker process, owned by the agent/server process.

    Thread-safe. The worker talks to the parent only through the store (jobs, adapters)
    and three signals (wake, stop, ready); nothing big crosses the process boundary.
    """

    def __init__(
        self,
        settings: Settings,
        store_path: str | Path,
        *,
        poll_s: float = 1.0,
        nice: int = 10,
        max_restarts: int = 5,
    ) -> None:
        super().__init__(settings, poll_s=poll_s, nice=nice, max_restarts=max_restarts)
        self.store_path = str(store_path)
        self._store: Store | None = None

    @property
    def adapters_dir(self) -> Path:
        return adapters_dir(self.settings, self.store_path)

    def _spawn(self) -> None:
        self._launch(worker_main, "continual-lsp-trainer", self.store_path)

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the worker has loaded its model (or `timeout`, or it died)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if not self.alive or (deadline is not None and time.monotonic() > deadline):
                return False
        return True

    def _job(self, job_id: int) -> dict[str, Any] | None:
        if self._store is None:
            self._store = Store(self.store_path)
        return self._store.job(job_id)

    def _check(self, job_id: int) -> dict[str, Any] | None:
        job = self._job(job_id)
        if job is None:
            raise WorkerError(f"unknown job {job_id}")
        if job["status"] == "done":
            return job["result"] or {}
        if job["status"] == "failed":
            raise WorkerError(f"training job {job_id} failed: {job['error']}")
        if not self._stop.is_set():
            self.ensure_running()
        return None

    def wait_job(
        self, job_id: int, timeout: float | None = None, interval: float = 0.05
    ) -> dict[str, Any]:
        """Block until job `job_id` is done; its result. Raises WorkerError / TimeoutError.

        Restarts the worker if it died meanwhile. Call from a thread, not an event loop.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while (result := self._poll(job_id, deadline, timeout)) is None:
            time.sleep(interval)
        return result

    async def wait_job_async(
        self, job_id: int, timeout: float | None = None, interval: float = 0.05
    ) -> dict[str, Any]:
        """`wait_job` for an asyncio loop: polls the store between `asyncio.sleep`s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (result := self._poll(job_id, deadline, timeout)) is None:
            await asyncio.sleep(interval)
        return result

    def _poll(
        self, job_id: int, deadline: float | None, timeout: float | None
    ) -> dict[str, Any] | None:
        """The job's result once done, None while it runs, TimeoutError past `deadline`."""
        result = self._check(job_id)
        if result is None and deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"training job {job_id} not done after {timeout} s")
        return result

    def kill(self) -> None:
        """SIGKILL the worker (tests: a crash mid-step)."""
        if self._process is not None and self._process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, signal.SIGKILL)
            self._process.join(5)

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            super().stop(timeout)
            if self._store is not None:
                self._store.close()
                self._store = None
