"""The agent's side of learning: enqueue SDPO jobs, wait for them, swap the sampler.

Training itself runs in the worker process (continual_lsp.learning.worker); this module
only talks to the store's queue and tells the sampler which adapter version to use.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from continual_lsp.config import Settings
from continual_lsp.policy.adapter_registry import AdapterRegistry
from continual_lsp.policy.base import Sampler
from continual_lsp.protocol import LearnedNotification
from continual_lsp.store import Store
from continual_lsp.tools.base import ToolCall

log = logging.getLogger(__name__)

WAIT_SECONDS = 300.0
# How often a wait looks up from the job to see whether the session stopped.
STOP_CHECK_SECONDS = 0.5


class ProgressListener(Protocol):
    """Where a training wait reports its progress (the agent's listener is one)."""

    def on_progress(
        self, token: str, title: str, message: str, percentage: int | None, done: bool
    ) -> None: ...


def adapter_item_id(version: int) -> str:
    return f"adapter-{version}"


class TrainingJobs:
    """One training job per correction: queued, waited for, its version served."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.adapters = AdapterRegistry(store)
        self._worker: Any = None
        self._loaded: int | None = None  # adapter version the sampler serves
        # A denial's step is waited for on another thread (the agent shows the retry
        # first): the worker handle is shared with it, and `stop` ends its waits until
        # a job is queued again.
        self._worker_lock = threading.Lock()
        self._stopped = False

    # -- queue ----------------------------------------------------------------------------

    def enqueue(
        self,
        proposal_id: str,
        signal: str,
        correction: str | None,
        demonstration: ToolCall | None,
        examples: list[ToolCall] | None = None,
        held: bool = False,
    ) -> int | None:
        """Queue the decision's SDPO job; a `held` one waits for `release` (its
        demonstration is still being chosen) and is released by crash recovery."""
        if not self.settings.enable_training:
            return None
        row = self.store.proposal(proposal_id)
        if row is None:
            return None
        return self._enqueue(row, signal, correction, demonstration, examples or [], held)

    def release(
        self,
        job_id: int | None,
        demonstration: ToolCall | None,
        examples: list[ToolCall],
        cluster: str | None = None,
    ) -> None:
        """Complete a held job with what was chosen since (none: it teaches the correction
        alone) and the cluster its correction was routed to, and let the worker take it."""
        if job_id is None:
            return
        updates: dict[str, Any] = {"examples": [e.model_dump() for e in examples]}
        if cluster is not None:
            updates["cluster"] = cluster
        if demonstration is not None:
            updates["demonstration"] = demonstration.model_dump()
        self.store.release_held_job(job_id, updates)
        self._ensure_worker().notify()

    def enqueue_from_row(
        self, row: dict[str, Any], decision: dict[str, Any], demonstration: ToolCall | None
    ) -> int | None:
        """Crash recovery: a decision was committed but its job never was."""
        if not self.settings.enable_training:
            return None
        signal = "edit" if decision["decision"] == "edit" else "deny"
        return self._enqueue(row, signal, decision["correction"], demonstration)

    def _enqueue(
        self,
        row: dict[str, Any],
        signal: str,
        correction: str | None,
        demonstration: ToolCall | None,
        examples: list[ToolCall] | None = None,
        held: bool = False,
    ) -> int:
        # deferred: learning/ loads torch (1.2 s); the agent imports none, so a server answers initialize before it
        from continual_lsp.learning.sdpo import SdpoJob

        job = SdpoJob(
            proposal_id=row["id"],
            prompt_tokens=row["prompt_tokens"],
            tokens=row["tokens"],
            logprobs=row["logprobs"],
            correction=correction,
            demonstration=demonstration.model_dump() if demonstration else None,
            examples=[e.model_dump() for e in examples or []],
            signal=signal,
        )
        job_id = self.store.enqueue_job("sdpo", job.model_dump(), held=held)
        if not held:
            self._ensure_worker().notify()
        return job_id

    def resume(self) -> None:
        """Jobs left queued or running by a crash start again without waiting for the
        next decision; a job held for a choice the crash cut short runs without it."""
        for job_id in self.store.held_jobs():
            self.store.release_held_job(job_id)
        if self.settings.enable_training and self.store.queue_depth(("sdpo",)) > 0:
            self._ensure_worker().notify()

    def warm(self) -> None:
        """Start the worker now, so the first correction of a session does not wait for it
        to load the model; it loads at low priority (`nice`) while the reviewer reads."""
        if self.settings.enable_training:
            self._ensure_worker()

    @property
    def worker_ready(self) -> bool:
        """Whether the worker has loaded its model and takes jobs now."""
        return self._worker is not None and bool(self._worker.ready)

    def has_job(self, proposal_id: str) -> bool:
        return self.store.has_job_for(proposal_id)

    # -- worker ---------------------------------------------------------------------------

    def _ensure_worker(self) -> Any:
        with self._worker_lock:
            self._stopped = False
            return self._running_worker()

    def _running_worker(self) -> Any:
        """The worker, started or restarted as needed (`_worker_lock` held). WorkerError
        when it died more than its `max_restarts` allow."""
        # deferred: learning/ loads torch (1.2 s); the agent imports none, so a server answers initialize before it
        from continual_lsp.learning.team_worker import can_share, team_trainer
        from continual_lsp.learning.worker import TrainingWorker

        if self._worker is None:
            if can_share(self.settings):
                # A seat in the process's one worker: jobs taken in turn with other users.
                team = team_trainer(self.settings)
                self._worker = team.seat(self.settings, self.store.path)
            else:
                self._worker = TrainingWorker(self.settings, self.store.path)
            self._worker.start()
        elif not self._worker.alive:
            # Restarted by the worker itself, which counts its deaths: past `max_restarts`
            # it raises WorkerError, which `wait` tells the editor, instead of a crash loop.
            self._worker.ensure_running()
        return self._worker

    def _result(self, job_id: int) -> dict[str, Any] | None:
        """The job's result once done; None when `stop` came first (the job stays queued
        and runs in the next session). TimeoutError after WAIT_SECONDS."""
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            with self._worker_lock:
                if self._stopped:
                    return None
                worker = self._running_worker()
            remaining = max(0.0, deadline - time.monotonic())
            try:
                return dict(worker.wait_job(job_id, timeout=min(STOP_CHECK_SECONDS, remaining)))
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise

    def wait(
        self,
        job_id: int,
        proposal_id: str,
        listener: ProgressListener,
        policy: Sampler | None,
    ) -> LearnedNotification | None:
        token = f"continual-train-{job_id}"
        listener.on_progress(token, "Learning from your correction", "SDPO step", None, False)
        depth = self.store.queue_depth(("sdpo",))
        if depth > self.settings.max_queued_jobs:
            # A burst of corrections: the decision and its job are committed, the job
            # trains in turn; only the retry stops waiting for it.
            listener.on_progress(
                token,
                "Learning",
                f"{depth} corrections are waiting to train (limit max_queued_jobs = "
                f"{self.settings.max_queued_jobs}): this one is saved and trains in turn; "
                "the retry does not wait for it",
                None,
                True,
            )
            return None
        # deferred: learning/ loads torch (1.2 s); the agent imports none, so a server answers initialize before it
        from continual_lsp.learning.worker import WorkerError

        try:
            result = self._result(job_id)
        except TimeoutError:
            # The job stays queued and lands later; the retry must not wait forever.
            listener.on_progress(token, "Learning", "still training; retrying now", None, True)
            return None
        except WorkerError as exc:
            listener.on_progress(token, "Learning", f"step failed: {exc}", None, True)
            log.error("%s", exc)
            return None
        if result is None:
            listener.on_progress(token, "Learning", "the session ended first", None, True)
            return None
        if policy is not None:
            self.sync_sampler(policy)
        listener.on_progress(
            token, "Learning", f"step {result.get('step')} loss {result.get('loss'):.4f}", 100, True
        )
        return LearnedNotification(
            proposal_id=proposal_id,
            step=int(result.get("step", 0)),
            loss=float(result.get("loss", 0.0)),
            adapter_version=self.current_version_name(),
            seconds=float(result.get("seconds", 0.0)),
        )

    def sync_sampler(self, policy: Sampler) -> None:
        """Make the sampler serve the registry's newest intact adapter.

        A damaged version is also set inactive with a logged reason (the agent owns the
        versions; the worker only passes them over): the reviewer keeps a working agent.
        """
        newest = self.adapters.newest_active()
        if (newest["version"] if newest else None) == self._loaded:
            return  # already serving it: no need to hash the file on every turn
        adapter = self.adapters.newest_intact(policy, self._set_aside)
        if adapter is None:
            # The base weights, unless nothing was ever trained (a fresh policy is base).
            if self._loaded is not None or self.store.adapters():
                self.adapters.serve(policy, None)
            self._loaded = None
        elif adapter["version"] != self._loaded:
            self.adapters.serve(policy, adapter)
            self._loaded = adapter["version"]

    def _set_aside(self, adapter: dict[str, Any], problem: str) -> None:
        log.error(
            "adapter %s is damaged (%s); serving the previous version",
            adapter_item_id(adapter["version"]),
            problem,
        )
        self.store.append_event(
            "adapter_corrupt", {"version": adapter["version"], "problem": problem}
        )
        self.store.set_adapter_active(adapter["version"], False)

    def current_version_name(self) -> str | None:
        current = self.store.current_adapter()
        return adapter_item_id(current["version"]) if current else None

    def revert_adapter(self, version: int, policy: Sampler | None) -> None:
        """Serve the version before `version` (all versions stay on disk)."""
        self.store.set_adapter_active(version, False)
        if policy is not None:
            self.sync_sampler(policy)

    def stop(self) -> None:
        with self._worker_lock:
            worker, self._worker = self._worker, None
            self._stopped = True
        if worker is not None:
            worker.stop()
