"""The team worker: every user's jobs in one process, taken in turn (issue 20)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from continual_lsp.agent.training_jobs import TrainingJobs
from continual_lsp.config import Settings
from continual_lsp.learning import team_worker
from continual_lsp.learning.team_worker import (
    Member,
    TeamSeat,
    TeamTrainer,
    can_share,
    claim_in_turn,
    take_turns,
)
from continual_lsp.policy.local.local_policy import LocalPolicy
from continual_lsp.store import Store

from .test_worker import assert_only_complete_versions, payload


def test_a_burst_from_one_user_waits_its_turn(tmp_path: Path) -> None:
    stores = [Store(tmp_path / f"{name}.sqlite3") for name in ("alice", "bob", "carol")]
    try:
        alice, bob, carol = stores
        for n in range(3):
            alice.enqueue_job("sdpo", {"n": n})
        carol.enqueue_job("consolidate", {})
        bob.enqueue_job("sdpo", {})
        carol.enqueue_job("sdpo", {})
        order, turn = [], 0
        while (claimed := claim_in_turn(stores, turn)) is not None:
            index, job = claimed
            stores[index].finish_job(job["id"], {})
            order.append((["alice", "bob", "carol"][index], job["kind"]))
            turn = index + 1
        assert order == [
            ("alice", "sdpo"),
            ("bob", "sdpo"),  # not after alice's whole burst
            ("carol", "sdpo"),  # carol's step before her own consolidation
            ("alice", "sdpo"),
            ("alice", "sdpo"),
            ("carol", "consolidate"),  # the background lane after every step
        ]
    finally:
        for store in stores:
            store.close()


def test_a_correction_sent_during_a_burst_is_taken_next(tmp_path: Path) -> None:
    """The storm of bench/team.py in miniature: Bob and Carol correct while Alice's burst
    of eight trains; each of them waits at most for the step in progress plus one."""
    names = ("alice", "bob", "carol")
    members = [
        Member(Settings(user=n), Store(tmp_path / f"{n}.sqlite3"), tmp_path / n, policy=None)
        for n in names
    ]
    alice, bob, carol = (m.store for m in members)
    for k in range(8):
        alice.enqueue_job("sdpo", {"k": k})
    stop, wake = threading.Event(), threading.Event()
    order: list[str] = []

    def step(member: Member, job: dict[str, Any]) -> None:
        order.append(member.settings.user)
        if len(order) == 1:  # while Alice's first step trains
            carol.enqueue_job("sdpo", {})
            bob.enqueue_job("sdpo", {})
        member.store.finish_job(job["id"], {})
        if not any(m.store.queue_depth() for m in members):
            stop.set()

    try:
        take_turns(members, lambda: None, step, wake, stop, poll_s=0.01)
    finally:
        for member in members:
            member.store.close()
    assert order == ["alice", "bob", "carol"] + ["alice"] * 7


class Crash(Exception):
    """The server process dying in the middle of a step."""


class RecordingTeam:
    """The process's team trainer with no process: it records who joined; the test runs
    the worker's loop (`take_turns`) itself, with a step that only records its owner."""

    def __init__(self) -> None:
        self.joined: dict[str, Settings] = {}
        self.alive = True

    def join(self, settings: Settings, store_path: str) -> None:
        self.joined[str(store_path)] = settings

    def ensure_running(self) -> None:
        pass

    def notify(self) -> None:
        pass

    def seat(self, settings: Settings, store_path: str | Path) -> TeamSeat:
        return TeamSeat(self, settings, store_path)  # type: ignore[arg-type]


def test_a_restart_resumes_every_users_queued_jobs_in_their_own_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"user{i:02d}" for i in range(20)]
    settings = {
        n: Settings(
            user=n,
            store_path=str(tmp_path / n / "store.sqlite3"),
            adapters_dir=str(tmp_path / n / "adapters"),
            shared_training=True,
        )
        for n in names
    }
    queued: dict[str, list[int]] = {}
    for n in names:
        Path(settings[n].store_file()).parent.mkdir(parents=True)
        store = Store(settings[n].store_file())
        queued[n] = [store.enqueue_job("sdpo", {"owner": n, "k": k}) for k in range(2)]
        store.close()
    # user05's latest decision was committed with its job held (its demonstration was
    # still being chosen) when the server went down.
    store = Store(settings["user05"].store_file())
    queued["user05"].append(store.enqueue_job("sdpo", {"owner": "user05", "k": 2}, held=True))
    store.close()

    def life(team: RecordingTeam, crash_after: int | None) -> list[tuple[str, str, int]]:
        """One server process: every user's agent resumes its training; the worker takes
        jobs in turn until none is left (or the process dies in step `crash_after`)."""
        stop, wake = threading.Event(), threading.Event()
        monkeypatch.setattr(team_worker, "team_trainer", lambda _settings: team)
        stores = [Store(settings[n].store_file()) for n in names]
        ran: list[tuple[str, str, int]] = []
        try:
            for store in stores:
                TrainingJobs(store, settings[Path(store.path).parent.name]).resume()
            members = [
                Member(s, Store(path), Path(s.adapters_dir or ""), policy=None)
                for path, s in team.joined.items()
            ]

            def step(member: Member, job: dict[str, Any]) -> None:
                ran.append((member.settings.user, job["payload"]["owner"], job["id"]))
                if len(ran) == crash_after:
                    raise Crash  # the job stays `running` in its store
                member.store.finish_job(job["id"], {"trained_by": member.settings.user})
                if not any(m.store.queue_depth() for m in members):
                    stop.set()

            try:
                take_turns(members, lambda: None, step, wake, stop, poll_s=0.01)
            finally:
                for member in members:
                    member.store.close()
        finally:
            for store in stores:
                store.close()
        return ran

    with pytest.raises(Crash):
        life(RecordingTeam(), crash_after=7)
    ran = life(RecordingTeam(), crash_after=None)

    assert len(ran) == 41 - 6  # all but the six finished before the crash, once each
    assert all(member == owner for member, owner, _ in ran)  # each run as its owner
    # The crash cut short the 7th job in turn, user06's first: it is run again.
    assert ("user06", "user06", queued["user06"][0]) in ran
    for n in names:
        store = Store(settings[n].store_file())
        try:
            for job_id in queued[n]:
                job = store.job(job_id)
                assert job is not None and job["status"] == "done"
                assert job["payload"]["owner"] == n and job["result"]["trained_by"] == n
            assert store.queue_depth() == 0 and store.held_jobs() == []
        finally:
            store.close()


def test_who_may_share_the_worker() -> None:
    assert not can_share(Settings())  # off unless asked
    assert can_share(Settings(shared_training=True))
    assert not can_share(Settings(shared_training=True, teacher="ema"))
    assert not can_share(Settings(shared_training=True, backend="tinker"))


@pytest.mark.model
def test_one_process_trains_two_users_in_turn_into_their_own_stores(
    policy: LocalPolicy, tmp_path: Path
) -> None:
    users = {}
    for name in ("alice", "bob"):
        home = tmp_path / name
        settings = Settings(
            user=name,
            store_path=str(home / "store.sqlite3"),
            adapters_dir=str(home / "adapters"),
            shared_training=True,
        )
        users[name] = (settings, Store(settings.store_file()))
    alice, bob = users["alice"][1], users["bob"][1]
    # Alice's burst is queued before Bob's one correction.
    alice_jobs = [alice.enqueue_job("sdpo", payload(policy, f"a{n}")) for n in range(2)]
    bob_job = bob.enqueue_job("sdpo", payload(policy, "b0"))
    team = TeamTrainer(users["alice"][0], poll_s=0.5)
    seats = {name: team.seat(s, s.store_file()) for name, (s, _) in users.items()}
    try:
        for seat in seats.values():
            seat.start()
        assert team.alive and team.pid is not None
        bob_result = seats["bob"].wait_job(bob_job, timeout=900)
        # Bob's step ran second: Alice's second step was still waiting when his was done.
        assert alice.job(alice_jobs[1])["status"] in ("pending", "running")
        assert alice.job(alice_jobs[0])["status"] == "done"
        results = [seats["alice"].wait_job(j, timeout=900) for j in alice_jobs]
        assert [r["name"] for r in results] == ["v0001", "v0002"]
        assert bob_result["name"] == "v0001"
        for settings, store in users.values():
            directory = Path(settings.adapters_dir or "")
            assert_only_complete_versions(directory, store)
            assert all(Path(a["path"]).parent == directory for a in store.adapters())
        assert len(alice.adapters()) == 2 and len(bob.adapters()) == 1
    finally:
        team.stop()
        for seat in seats.values():
            seat.stop()
        for _, store in users.values():
            store.close()
    assert not team.alive
