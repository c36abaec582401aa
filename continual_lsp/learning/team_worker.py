"""One training worker for every user of a server process, taking jobs in turn (issue 20).

A worker per user (worker.py) costs a process and a copy of the model per user. The team
worker is one process with one base model (a `ModelHost`, each user's adapter in its own
slot) and one loop that takes jobs round-robin across the users' stores: a user who sends
ten corrections in a row gets one step, then every other user with a waiting job gets
one, and so on. Every user's SDPO steps go before any user's consolidation, which is the
background lane. Each job runs exactly as worker.py runs it (`handle_job`: replay after a
crash, the version written to that user's adapters directory and registered in that
user's store), with that user's adapter live for the whole job.

Turned on by `Settings.shared_training`. Not for the EMA teacher: it is a companion
adapter in the model, which the shared model would give every user, so such a user keeps
a worker of its own; nor for the tinker backend, which trains remotely.

Parent side: `team_trainer(settings)` is the process's one `TeamTrainer`; `seat(...)`
gives each user a `TeamSeat`, which `TrainingJobs` drives like a `TrainingWorker`
(start, notify, wait for a job in that user's store). Users join the running worker
through a queue; a restarted worker gets every user again.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from continual_lsp.config import Settings
from continual_lsp.learning.worker import (
    JOB_KINDS,
    Signal,
    TrainingWorker,
    WorkerLink,
    WorkerProcess,
    become_worker,
    handle_job,
    keep_prompt_prefix,
    open_adapters_dir,
    sync_weights,
)
from continual_lsp.store.db import Store

if TYPE_CHECKING:
    from continual_lsp.policy.local.local_policy import LocalPolicy

log = logging.getLogger(__name__)

# Interactive steps first, across all users; then the background lane.
PRIORITY = (("sdpo",), ("consolidate",))


def can_share(settings: Settings) -> bool:
    """Whether this user's training may run in the team worker (see the module docstring)."""
    return settings.shared_training and settings.backend == "local" and settings.teacher != "ema"


def claim_in_turn(stores: Sequence[Store], start: int) -> tuple[int, dict[str, Any]] | None:
    """The next job and whose it is (index into `stores`), asking the users in turn from
    `start`; any user's SDPO job before any user's consolidation."""
    for kinds in PRIORITY:
        for offset in range(len(stores)):
            index = (start + offset) % len(stores)
            job = stores[index].claim_job(kinds)
            if job is not None:
                return index, job
    return None


# -- child side -------------------------------------------------------------------------------


@dataclass
class Member:
    """One user as the team worker holds them: their store, their adapters directory and
    a policy whose slot on the worker's host holds their adapter."""

    settings: Settings
    store: Store
    directory: Path
    policy: LocalPolicy  # on the worker's shared host


def _join(members: list[Member], settings_data: dict[str, Any], store_path: str) -> None:
    # deferred: transformers and peft load in the spawned worker, not in the server importing this
    from continual_lsp.policy.local.local_policy import LocalPolicy
    from continual_lsp.policy.local.model_host import shared_host

    if any(str(m.store.path) == store_path for m in members):
        return
    settings = Settings.model_validate(settings_data)
    store = Store(store_path)
    directory = open_adapters_dir(settings, store_path)
    policy = LocalPolicy(settings, host=shared_host(settings))
    sync_weights(policy, store)
    members.append(Member(settings, store, directory, policy))
    log.info("user %s joined the team worker (%d users)", settings.user, len(members))


def team_worker_main(settings_data: dict[str, Any], link: WorkerLink, joins: Any) -> None:
    """Entry point of the spawned team worker (see the module docstring)."""
    become_worker(link, "team worker")
    # deferred: transformers and peft load in the spawned worker, not in the server importing this
    from continual_lsp.policy.local.model_host import shared_host

    shared_host(Settings.model_validate(settings_data))  # the model, before the first job
    link.ready.set()
    members: list[Member] = []

    def admit() -> None:
        with contextlib.suppress(queue.Empty):
            while True:
                _join(members, *joins.get_nowait())

    def run(member: Member, job: dict[str, Any]) -> None:
        with member.policy.exclusive():
            handle_job(
                member.policy, member.store, member.directory, member.settings, job, link.stop.wait
            )
        if job["kind"] == "sdpo" and not any(m.store.queue_depth(JOB_KINDS) for m in members):
            keep_prompt_prefix(member.policy)

    try:
        take_turns(members, admit, run, link.wake, link.stop, link.poll_s)
    finally:
        for member in members:
            member.store.close()


def take_turns(
    members: list[Member],
    admit: Callable[[], None],
    run: Callable[[Member, dict[str, Any]], None],
    wake: Signal,
    stop: Signal,
    poll_s: float,
) -> None:
    """The team worker's loop: let joining users in, claim the next job in turn (see
    `claim_in_turn`), run it as its owner (`run(member, job)`), until `stop` is set.
    A job left `running` by a killed worker is claimed again, by its owner."""
    turn = 0
    while not stop.is_set():
        admit()
        claimed = claim_in_turn([m.store for m in members], turn)
        if claimed is None:
            wake.wait(poll_s)
            wake.clear()
            continue
        index, job = claimed
        turn = index + 1  # the next look starts with the next user
        run(members[index], job)


# -- parent side ------------------------------------------------------------------------------


class TeamTrainer(WorkerProcess):
    """Handle on the team worker process, shared by every user of this process."""

    label = "team training worker"

    def __init__(
        self, settings: Settings, *, poll_s: float = 1.0, nice: int = 10, max_restarts: int = 5
    ) -> None:
        super().__init__(settings, poll_s=poll_s, nice=nice, max_restarts=max_restarts)
        self._joins: Any = None
        self._members: dict[str, dict[str, Any]] = {}  # store path -> settings

    def join(self, settings: Settings, store_path: str) -> None:
        """Add a user (idempotent); a running worker takes them at its next look."""
        with self._lock:
            if store_path in self._members:
                return
            self._members[store_path] = settings.model_dump()
            if self.alive:
                self._joins.put((self._members[store_path], store_path))
                self._wake.set()

    def _spawn(self) -> None:
        """A fresh worker gets every user so far (the jobs a dead one held replay)."""
        self._joins = self._ctx.Queue()
        for store_path, data in self._members.items():
            self._joins.put((data, store_path))
        self._launch(team_worker_main, "continual-lsp-team-trainer", self._joins)

    def seat(self, settings: Settings, store_path: str | Path) -> TeamSeat:
        return TeamSeat(self, settings, store_path)


class TeamSeat(TrainingWorker):
    """One user's view of the team worker, with a `TrainingWorker`'s interface: jobs and
    their results are read from this user's store; the process is the team's."""

    def __init__(self, team: TeamTrainer, settings: Settings, store_path: str | Path) -> None:
        super().__init__(settings, store_path)
        self.team = team

    @property
    def alive(self) -> bool:
        return self.team.alive

    @property
    def ready(self) -> bool:
        return self.team.ready

    @property
    def pid(self) -> int | None:
        return self.team.pid

    def start(self) -> None:
        self.team.join(self.settings, self.store_path)
        self.team.ensure_running()

    def ensure_running(self) -> None:
        self.team.ensure_running()

    def notify(self) -> None:
        self.team.notify()

    def stop(self, timeout: float = 10.0) -> None:
        """This user leaves; the team worker keeps serving the others (it ends with the
        process, or `TeamTrainer.stop`)."""
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


_team: TeamTrainer | None = None
_team_lock = threading.Lock()


def team_trainer(settings: Settings) -> TeamTrainer:
    """The process's team worker handle (the first user's settings pick its model)."""
    global _team
    with _team_lock:
        if _team is None:
            _team = TeamTrainer(settings)
        return _team
