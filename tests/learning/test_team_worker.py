"""The team worker: every user's jobs in one process, taken in turn (issue 20)."""

from __future__ import annotations

from pathlib import Path

import pytest

from continual_lsp.config import Settings
from continual_lsp.learning.team_worker import TeamTrainer, can_share, claim_in_turn
from continual_lsp.policy.local import LocalPolicy
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
