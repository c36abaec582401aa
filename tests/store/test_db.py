from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from continual_lsp.store import Store, StoreError


def _proposal(store: Store) -> str:
    task = store.create_task("fix it", "/ws")
    return store.add_proposal(task, 0, "read", {"path": "a"}, [1, 2], [3], [-0.5], None, None)


def test_wal_mode_and_schema_version(store: Store) -> None:
    db = sqlite3.connect(store.path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "1"


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    Store(tmp_path / "s.db").close()
    db = sqlite3.connect(tmp_path / "s.db")
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="schema v99"):
        Store(tmp_path / "s.db")


def test_decision_recorded_once(store: Store) -> None:
    pid = _proposal(store)
    store.record_decision(pid, "deny", correction="use edit_lines")
    with pytest.raises(StoreError, match="already decided"):
        store.record_decision(pid, "approve")
    with pytest.raises(StoreError, match="unknown proposal"):
        store.record_decision("prop-nope", "approve")
    decisions = store.events(kind="decision")
    assert len(decisions) == 1
    assert decisions[0]["payload"]["correction"] == "use edit_lines"


def test_proposal_keeps_tokens_and_logprobs(store: Store) -> None:
    pid = _proposal(store)
    row = store.proposal(pid)
    assert row is not None
    assert row["tokens"] == [3] and row["logprobs"] == [-0.5] and row["prompt_tokens"] == [1, 2]


def test_job_queue_replays_a_running_job(store: Store) -> None:
    job = store.enqueue_job("sdpo", {"proposalId": "p"})
    claimed = store.claim_job(("sdpo",))
    assert claimed is not None and claimed["id"] == job and claimed["attempts"] == 1
    # Not finished (as after a crash): claimed again, attempt 2.
    again = store.claim_job(("sdpo",))
    assert again is not None and again["id"] == job and again["attempts"] == 2
    store.finish_job(job, {"loss": 1.0})
    assert store.claim_job(("sdpo",)) is None
    assert store.queue_depth() == 0


def test_adapters_current_and_revert(store: Store) -> None:
    v1 = store.add_adapter("a1", "/x/1", "aa", None, {"loss": 1})
    v2 = store.add_adapter("a2", "/x/2", "bb", v1, {"loss": 0.5})
    assert store.current_adapter()["version"] == v2  # type: ignore[index]
    store.set_adapter_active(v2, False)
    assert store.current_adapter()["version"] == v1  # type: ignore[index]


def test_lane_items_and_counters(store: Store) -> None:
    item = store.add_lane_item(
        {
            "text": "use pnpm",
            "lane": "CODE",
            "reason": "a guard can rewrite npm",
            "cue": {"tools": ["bash"]},
        }
    )
    store.update_lane_item(item, active=False)
    got = store.lane_item(item)
    assert got is not None and got["active"] == 0 and got["cue"] == {"tools": ["bash"]}
    with pytest.raises(StoreError):
        store.update_lane_item(item, bogus=1)
    store.bump("context_tokens", 12)
    store.bump("context_tokens", 3)
    assert store.counter("context_tokens") == 15


def test_sigkill_between_commit_and_action_loses_nothing(tmp_path: Path) -> None:
    """The process dies right after committing a decision; a new process finds it pending."""
    path = tmp_path / "s.db"
    script = textwrap.dedent(
        f"""
        import os, signal
        from continual_lsp.store import Store
        s = Store({str(path)!r})
        t = s.create_task("t", "/ws")
        p = s.add_proposal(t, 0, "write", {{"path": "a", "content": "x"}}, [1], [2], [-1.0], None, None)
        s.record_decision(p, "approve")
        print(p, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        s.mark_applied(p)  # never reached
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL
    pid = proc.stdout.strip()
    store = Store(path)
    pending = store.pending_decisions()
    assert [d["proposal_id"] for d in pending] == [pid]
    assert len(store.events(kind="decision", proposal_id=pid)) == 1
    store.close()


def test_a_full_disk_is_a_clear_error_and_loses_nothing_committed(store: Store) -> None:
    pid = _proposal(store)
    store.record_decision(pid, "approve")
    # SQLite's own page cap behaves exactly like a full disk (SQLITE_FULL).
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count={pages}")
    with pytest.raises(StoreError, match="is full: nothing was recorded"):
        for _ in range(200):
            store.append_event("note", {"text": "x" * 4000})
    assert store.decision(pid) is not None
    store._db.execute("PRAGMA max_page_count=1073741823")
    store.append_event("note", {"text": "after"})  # usable again once there is room


def test_a_really_full_disk_says_so_and_loses_nothing(tmp_path: Path) -> None:
    """Issue 32: on a full filesystem COMMIT fails with SQLITE_FULL and SQLite has already
    rolled back, so the reviewer read "cannot rollback - no transaction is active". A
    400 KB tmpfs in a private mount namespace (root only) is the real full disk."""
    if shutil.which("unshare") is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root and unshare")
    disk = tmp_path / "disk"
    disk.mkdir()
    script = textwrap.dedent(
        f"""
        import subprocess
        from continual_lsp.store import Store, StoreError
        disk = {str(disk)!r}
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", disk], check=True)
        s = Store(disk + "/s.sqlite3")
        t = s.create_task("t", "/ws")
        p = s.add_proposal(t, 0, "read", {{"path": "a"}}, [1], [2], [-1.0], None, None)
        s.record_decision(p, "approve")
        try:
            for _ in range(1000):
                s.append_event("note", {{"text": "x" * 4000}})
        except StoreError as exc:
            print("ERROR", exc)
        assert s.decision(p) is not None, "a committed decision was lost"
        subprocess.run(["mount", "-o", "remount,size=8m", disk], check=True)
        s.append_event("note", {{"text": "after"}})
        print("USABLE", len(s.events(kind="note")) > 0)
        """
    )
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "mount" in proc.stderr and "ERROR" not in proc.stdout:
        pytest.skip(f"could not mount a tmpfs here: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 0, proc.stderr
    assert "is full: nothing was recorded" in proc.stdout, proc.stdout + proc.stderr
    assert "no transaction is active" not in proc.stdout + proc.stderr
    assert "USABLE True" in proc.stdout


def test_a_released_job_waits_in_the_queue(store: Store) -> None:
    job = store.enqueue_job("sdpo", {"proposal_id": "p"})
    assert store.claim_job(("sdpo",)) is not None
    store.release_job(job, "service unreachable")
    assert store.job(job)["status"] == "pending"  # type: ignore[index]
    assert store.has_job_for("p") and store.queue_depth(("sdpo",)) == 1


def test_events_of_one_cluster_use_the_cluster_index(store: Store) -> None:
    store.append_event("lane_situation", {"clusterId": "cl-a", "tool": "write"})
    store.append_event("lane_situation", {"clusterId": "cl-b", "tool": "bash"})
    store.append_event("consolidation", {"clusterId": "cl-a"})
    store.append_event("lane_situation", {"clusterId": "cl-a", "tool": "edit"})
    found = store.events(kind="lane_situation", cluster_id="cl-a")
    assert [e["payload"]["tool"] for e in found] == ["write", "edit"]
    plan = store._query(
        "EXPLAIN QUERY PLAN SELECT * FROM events WHERE kind=?"
        " AND json_extract(payload, '$.clusterId')=?",
        ("lane_situation", "cl-a"),
    )
    assert any("events_cluster" in str(tuple(row)) for row in plan)


def test_store_files_are_private(tmp_path: Path) -> None:
    """Issue 15: store files were 0644, readable by every local user."""
    path = tmp_path / "new" / "dir" / "s.sqlite3"
    store = Store(path)
    store.close()
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    for sibling in path.parent.iterdir():  # -wal and -shm follow the database's mode
        assert sibling.stat().st_mode & 0o077 == 0, sibling
    path.chmod(0o644)  # a store made by an older version is tightened on open
    Store(path).close()
    assert path.stat().st_mode & 0o777 == 0o600


def test_status_reads_never_wait_on_the_training_workers_write_lock(tmp_path: Path) -> None:
    """Issue 15 item 11: continual/status p99 was 94 ms while a step trained, because a
    thread waiting for the worker's write lock held the store's lock for every read."""
    import threading
    import time

    path = tmp_path / "s.sqlite3"
    store = Store(path)
    worker = sqlite3.connect(path, isolation_level=None)  # the training worker's process
    worker.execute("BEGIN IMMEDIATE")
    writer = threading.Thread(target=lambda: store.append_event("x", {}), daemon=True)
    writer.start()  # the decide thread: now waiting inside transaction() for the worker
    time.sleep(0.2)
    answered: list[float] = []

    def status_reads() -> None:
        started = time.monotonic()
        store.queue_depth()
        store.adapters()
        store.current_adapter()
        answered.append(time.monotonic() - started)

    reader = threading.Thread(target=status_reads, daemon=True)
    reader.start()
    reader.join(2)
    worker.execute("COMMIT")
    writer.join(10)
    worker.close()
    store.close()
    assert answered and answered[0] < 0.5, "status waited for the worker's write lock"


def test_a_second_store_in_one_process_keeps_the_first_ones_writes_visible(tmp_path: Path) -> None:
    """Opening a second Store on the same file in the same process (the training worker's
    handle in the server does) must not drop the first connection's file locks: else
    another process closing its connection deletes the WAL under it, and every later
    write of the first connection is lost to every other process."""
    path = tmp_path / "store.sqlite3"
    first = Store(path)
    first.append_event("before", {})
    second = Store(path)
    count = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
        " print(c.execute('SELECT COUNT(*) FROM events').fetchone()[0]); c.close()"
    )
    subprocess.run([sys.executable, "-c", count, str(path)], check=True)
    first.append_event("after", {})
    seen = subprocess.run(
        [sys.executable, "-c", count, str(path)], check=True, capture_output=True, text=True
    )
    assert int(seen.stdout) == len(first.events())
    first.close()
    second.close()


def test_cluster_jobs_are_the_done_ones_of_that_cluster_newest_first(store: Store) -> None:
    def done(cluster: str | None, name: str) -> int:
        job = store.enqueue_job("sdpo", {"proposal_id": name, "cluster": cluster})
        claimed = store.claim_job(("sdpo",))
        assert claimed is not None and claimed["id"] == job
        store.finish_job(job, {})
        return job

    done("c1", "a")
    done("c2", "other cluster")
    done("c1", "b")
    done(None, "not routed")
    store.enqueue_job("sdpo", {"proposal_id": "still held", "cluster": "c1"}, held=True)
    now = done("c1", "c")
    later = done("c1", "after")
    names = [p["proposal_id"] for p in store.cluster_jobs("sdpo", "c1", later, 5)]
    assert names == ["c", "b", "a"]  # the held one has not run
    assert [p["proposal_id"] for p in store.cluster_jobs("sdpo", "c1", now, 1)] == ["b"]
