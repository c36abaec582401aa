"""The per-user store: one SQLite file in WAL mode, the only place state lives.

Durability rule: every reviewer decision is committed here before anything acts on it
(tool execution, training, routing). Work that was committed but not finished is found
on restart through `pending_decisions()` and the job queue.

Over 500 lines on purpose: the schema and every transaction on it in one place, so the
durability rule is checked against one file.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from continual_lsp.errors import ReviewerError

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  ts REAL NOT NULL,
  kind TEXT NOT NULL,
  task_id TEXT,
  proposal_id TEXT,
  payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_kind ON events(kind);
CREATE INDEX IF NOT EXISTS events_proposal ON events(proposal_id);
-- the lanes look up a cluster's situations, consolidations and jobs on every correction
CREATE INDEX IF NOT EXISTS events_cluster ON events(kind, json_extract(payload, '$.clusterId'));
CREATE TABLE IF NOT EXISTS tasks (
  id TEXT PRIMARY KEY,
  text TEXT NOT NULL,
  workspace TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'open',
  created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS proposals (
  id TEXT PRIMARY KEY,
  task_id TEXT NOT NULL REFERENCES tasks(id),
  turn INTEGER NOT NULL,
  tool TEXT NOT NULL,
  arguments TEXT NOT NULL,
  prompt_tokens TEXT NOT NULL,
  tokens TEXT NOT NULL,
  logprobs TEXT NOT NULL,
  preview TEXT,
  adapter_version TEXT,
  status TEXT NOT NULL DEFAULT 'pending',
  created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS decisions (
  proposal_id TEXT PRIMARY KEY REFERENCES proposals(id),
  decision TEXT NOT NULL,
  correction TEXT,
  edited_arguments TEXT,
  diff TEXT,
  applied INTEGER NOT NULL DEFAULT 0,
  created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  kind TEXT NOT NULL,
  payload TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'pending',
  attempts INTEGER NOT NULL DEFAULT 0,
  result TEXT,
  error TEXT,
  created_at REAL NOT NULL,
  updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS adapters (
  version INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  path TEXT NOT NULL,
  sha256 TEXT NOT NULL,
  parent INTEGER,
  metrics TEXT NOT NULL DEFAULT '{}',
  source TEXT NOT NULL DEFAULT 'sdpo',
  active INTEGER NOT NULL DEFAULT 1,
  created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS clusters (
  id TEXT PRIMARY KEY,
  label TEXT NOT NULL,
  centroid BLOB,
  count INTEGER NOT NULL DEFAULT 0,
  created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS lane_items (
  id TEXT PRIMARY KEY,
  text TEXT NOT NULL,
  lane TEXT NOT NULL,
  reason TEXT NOT NULL,
  confidence REAL NOT NULL DEFAULT 1.0,
  kind TEXT,
  cluster_id TEXT REFERENCES clusters(id),
  cue TEXT NOT NULL DEFAULT '{}',
  spec TEXT NOT NULL DEFAULT '{}',
  source TEXT,
  active INTEGER NOT NULL DEFAULT 1,
  created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value REAL NOT NULL DEFAULT 0);
-- Undo without git: what an applied change replaced. state: open (committed before the
-- change runs) -> applied (after hashes known) -> undoing -> undone; failed when the
-- change did not run.
CREATE TABLE IF NOT EXISTS checkpoints (
  proposal_id TEXT PRIMARY KEY REFERENCES proposals(id),
  kind TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'open',
  note TEXT,
  created_at REAL NOT NULL,
  updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoint_files (
  proposal_id TEXT NOT NULL REFERENCES checkpoints(proposal_id),
  path TEXT NOT NULL,
  before BLOB,          -- NULL: the file did not exist before the change
  after_sha256 TEXT,    -- NULL: the change left no file there
  PRIMARY KEY (proposal_id, path)
);
"""


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class StoreError(ReviewerError):
    """A store operation that cannot be done; the message says why."""


def _is_full(exc: sqlite3.Error) -> bool:
    """SQLITE_FULL: the disk (or `max_page_count`) has no room for the change."""
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class Store:
    """Thread-safe handle on one user's SQLite file.

    Each process opens its own `Store`; the training worker and the server share the
    file through WAL, never a connection.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        # Corrections, notes and tasks are private: 0600 in a 0700 directory (SQLite
        # gives the -wal and -shm files the database's mode).
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Created here only when missing: closing any descriptor of an open database drops
        # this process's POSIX locks on it (SQLite's included), and another process's last
        # close would then delete the WAL under this process's connections.
        with contextlib.suppress(FileExistsError):
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
        os.chmod(self.path, 0o600)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=30.0
        )
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        # FULL: a decision acknowledged to the reviewer survives power loss, not only a crash.
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._migrate()
        # Status reads (continual/status while a step trains) get their own connection
        # and lock: `transaction()` holds `_lock` while BEGIN IMMEDIATE waits for the
        # training worker's write lock, and a WAL reader never needs to wait for that.
        self._reader = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=30.0
        )
        self._reader.row_factory = sqlite3.Row
        self._reader.execute("PRAGMA query_only=ON")
        self._read_lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()
        with self._read_lock:
            self._reader.close()

    # -- plumbing -----------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except sqlite3.OperationalError as exc:
                self._rollback()
                if _is_full(exc):
                    raise self._full_error() from exc
                raise
            except BaseException:
                self._rollback()
                raise
            else:
                try:
                    self._db.execute("COMMIT")
                except sqlite3.OperationalError as exc:
                    # A full disk usually fails here, when the pages reach the WAL, and
                    # SQLite has then rolled back already: ROLLBACK would answer "no
                    # transaction is active" and hide the cause.
                    self._rollback()
                    if _is_full(exc):
                        raise self._full_error() from exc
                    raise StoreError(f"could not commit to {self.path}: {exc}") from exc

    def _rollback(self) -> None:
        """End a failed transaction, if SQLite has not already; never replaces the error
        being raised (a rollback that fails leaves nothing committed either)."""
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    def _full_error(self) -> StoreError:
        return StoreError(
            f"the disk holding {self.path} is full: nothing was recorded (this change was "
            "not committed; everything committed before is kept); free some space and "
            "try again"
        )

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        """A committed-state read that never waits on a writer (see `__init__`)."""
        with self._read_lock:
            return self._reader.execute(sql, args).fetchall()

    def _migrate(self) -> None:
        with self._lock:
            # executescript commits on its own; every statement is IF NOT EXISTS.
            self._db.executescript(_SCHEMA)
        with self.transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO meta(key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
            elif int(row[0]) > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema v{row[0]}; this continual-lsp knows v{SCHEMA_VERSION}"
                )

    @staticmethod
    def _event(
        db: sqlite3.Connection,
        kind: str,
        payload: dict[str, Any],
        task_id: str | None = None,
        proposal_id: str | None = None,
    ) -> int:
        cur = db.execute(
            "INSERT INTO events(ts, kind, task_id, proposal_id, payload) VALUES (?,?,?,?,?)",
            (time.time(), kind, task_id, proposal_id, json.dumps(payload)),
        )
        return int(cur.lastrowid or 0)

    # -- event log ----------------------------------------------------------------------

    def append_event(
        self,
        kind: str,
        payload: dict[str, Any],
        task_id: str | None = None,
        proposal_id: str | None = None,
    ) -> int:
        with self.transaction() as db:
            return self._event(db, kind, payload, task_id, proposal_id)

    def events(
        self,
        kind: str | None = None,
        proposal_id: str | None = None,
        cluster_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Events in order, optionally of one kind, proposal, or lane cluster (`clusterId`)."""
        sql, args = "SELECT * FROM events WHERE 1=1", []
        if kind is not None:
            sql += " AND kind=?"
            args.append(kind)
        if proposal_id is not None:
            sql += " AND proposal_id=?"
            args.append(proposal_id)
        if cluster_id is not None:
            sql += " AND json_extract(payload, '$.clusterId')=?"
            args.append(cluster_id)
        rows = self._query(sql + " ORDER BY id", tuple(args))
        return [{**dict(r), "payload": json.loads(r["payload"])} for r in rows]

    # -- tasks and proposals --------------------------------------------------------------

    def create_task(self, text: str, workspace: str) -> str:
        task_id = new_id("task")
        with self.transaction() as db:
            db.execute(
                "INSERT INTO tasks(id, text, workspace, created_at) VALUES (?,?,?,?)",
                (task_id, text, workspace, time.time()),
            )
            self._event(db, "task", {"text": text, "workspace": workspace}, task_id=task_id)
        return task_id

    def task(self, task_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM tasks WHERE id=?", (task_id,))
        return dict(rows[0]) if rows else None

    def set_task_status(self, task_id: str, status: str, summary: str = "") -> None:
        with self.transaction() as db:
            db.execute("UPDATE tasks SET status=? WHERE id=?", (status, task_id))
            self._event(db, "task_status", {"status": status, "summary": summary}, task_id=task_id)

    def add_proposal(
        self,
        task_id: str,
        turn: int,
        tool: str,
        arguments: dict[str, Any],
        prompt_tokens: list[int],
        tokens: list[int],
        logprobs: list[float],
        preview: dict[str, Any] | None,
        adapter_version: str | None,
        status: str = "pending",
    ) -> str:
        proposal_id = new_id("prop")
        with self.transaction() as db:
            db.execute(
                "INSERT INTO proposals(id, task_id, turn, tool, arguments, prompt_tokens, tokens,"
                " logprobs, preview, adapter_version, status, created_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    proposal_id,
                    task_id,
                    turn,
                    tool,
                    json.dumps(arguments),
                    json.dumps(prompt_tokens),
                    json.dumps(tokens),
                    json.dumps(logprobs),
                    None if preview is None else json.dumps(preview),
                    adapter_version,
                    status,
                    time.time(),
                ),
            )
            self._event(
                db,
                "proposal",
                {
                    "tool": tool,
                    "arguments": arguments,
                    "tokens": tokens,
                    "logprobs": logprobs,
                    "adapterVersion": adapter_version,
                    "status": status,
                },
                task_id=task_id,
                proposal_id=proposal_id,
            )
        return proposal_id

    def proposal(self, proposal_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM proposals WHERE id=?", (proposal_id,))
        if not rows:
            return None
        row = dict(rows[0])
        for key in ("arguments", "prompt_tokens", "tokens", "logprobs", "preview"):
            row[key] = _loads(row[key])
        return row

    def approved_proposals(self, workspace: str, limit: int = 1000) -> list[dict[str, Any]]:
        """The newest calls the reviewer approved in `workspace` (id, tool, arguments,
        preview path), newest first: the evidence allow rules are offered from."""
        rows = self._query(
            "SELECT p.id, p.tool, p.arguments, json_extract(p.preview, '$.path') AS path"
            " FROM proposals p JOIN tasks t ON t.id = p.task_id"
            " JOIN decisions d ON d.proposal_id = p.id"
            " WHERE t.workspace = ? AND d.decision = 'approve'"
            " ORDER BY d.created_at DESC LIMIT ?",
            (workspace, limit),
        )
        return [{**dict(r), "arguments": json.loads(r["arguments"])} for r in rows]

    def set_proposal_status(self, proposal_id: str, status: str) -> None:
        with self.transaction() as db:
            db.execute("UPDATE proposals SET status=? WHERE id=?", (status, proposal_id))
            self._event(db, "proposal_status", {"status": status}, proposal_id=proposal_id)

    # -- decisions ------------------------------------------------------------------------

    def record_decision(
        self,
        proposal_id: str,
        decision: str,
        correction: str | None = None,
        edited_arguments: dict[str, Any] | None = None,
        diff: str | None = None,
    ) -> None:
        """Commit a reviewer decision, exactly once per proposal, before anything acts on it."""
        with self.transaction() as db:
            row = db.execute(
                "SELECT status, task_id FROM proposals WHERE id=?", (proposal_id,)
            ).fetchone()
            if row is None:
                raise StoreError(f"unknown proposal {proposal_id!r}")
            if db.execute("SELECT 1 FROM decisions WHERE proposal_id=?", (proposal_id,)).fetchone():
                raise StoreError(f"proposal {proposal_id!r} was already decided")
            if row["status"] != "pending":
                raise StoreError(f"proposal {proposal_id!r} is {row['status']}, not pending")
            db.execute(
                "INSERT INTO decisions(proposal_id, decision, correction, edited_arguments, diff,"
                " created_at) VALUES (?,?,?,?,?,?)",
                (
                    proposal_id,
                    decision,
                    correction,
                    None if edited_arguments is None else json.dumps(edited_arguments),
                    diff,
                    time.time(),
                ),
            )
            db.execute("UPDATE proposals SET status=? WHERE id=?", (decision, proposal_id))
            self._event(
                db,
                "decision",
                {
                    "decision": decision,
                    "correction": correction,
                    "editedArguments": edited_arguments,
                    "diff": diff,
                },
                task_id=row["task_id"],
                proposal_id=proposal_id,
            )

    def decision(self, proposal_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM decisions WHERE proposal_id=?", (proposal_id,))
        if not rows:
            return None
        row = dict(rows[0])
        row["edited_arguments"] = _loads(row["edited_arguments"])
        return row

    def mark_applied(self, proposal_id: str, result: dict[str, Any] | None = None) -> None:
        with self.transaction() as db:
            db.execute("UPDATE decisions SET applied=1 WHERE proposal_id=?", (proposal_id,))
            self._event(db, "tool_result", result or {}, proposal_id=proposal_id)

    def pending_decisions(self) -> list[dict[str, Any]]:
        """Decisions committed but not yet acted on (the crash-recovery work list)."""
        rows = self._query("SELECT proposal_id FROM decisions WHERE applied=0 ORDER BY created_at")
        return [d for r in rows if (d := self.decision(r["proposal_id"])) is not None]

    # -- checkpoints ----------------------------------------------------------------------

    def open_checkpoint(self, proposal_id: str, kind: str, before: dict[str, bytes | None]) -> None:
        """Commit what a change is about to replace, before it runs."""
        now = time.time()
        with self.transaction() as db:
            db.execute(
                "INSERT INTO checkpoints(proposal_id, kind, created_at, updated_at)"
                " VALUES (?,?,?,?) ON CONFLICT(proposal_id) DO UPDATE SET kind=excluded.kind,"
                " state='open', note=NULL, updated_at=excluded.updated_at",
                (proposal_id, kind, now, now),
            )
            db.execute("DELETE FROM checkpoint_files WHERE proposal_id=?", (proposal_id,))
            db.executemany(
                "INSERT INTO checkpoint_files(proposal_id, path, before) VALUES (?,?,?)",
                [(proposal_id, path, data) for path, data in before.items()],
            )
            self._event(
                db, "checkpoint", {"kind": kind, "paths": sorted(before)}, None, proposal_id
            )

    def seal_checkpoint(
        self,
        proposal_id: str,
        files: dict[str, tuple[bytes | None, str | None]],
        state: str = "applied",
        note: str | None = None,
    ) -> None:
        """After the change: each path's (content before, sha256 after). Paths the
        checkpoint already holds keep their committed `before`."""
        with self.transaction() as db:
            for path, (before, after) in files.items():
                db.execute(
                    "INSERT INTO checkpoint_files(proposal_id, path, before, after_sha256)"
                    " VALUES (?,?,?,?) ON CONFLICT(proposal_id, path)"
                    " DO UPDATE SET after_sha256=excluded.after_sha256",
                    (proposal_id, path, before, after),
                )
            db.execute(
                "UPDATE checkpoints SET state=?, note=?, updated_at=? WHERE proposal_id=?",
                (state, note, time.time(), proposal_id),
            )
            self._event(db, "checkpoint_" + state, {"paths": sorted(files)}, None, proposal_id)

    def set_checkpoint_state(self, proposal_id: str, state: str, note: str | None = None) -> None:
        with self.transaction() as db:
            db.execute(
                "UPDATE checkpoints SET state=?, note=COALESCE(?, note), updated_at=?"
                " WHERE proposal_id=?",
                (state, note, time.time(), proposal_id),
            )
            self._event(db, "checkpoint_" + state, {"note": note}, None, proposal_id)

    def checkpoint(self, proposal_id: str) -> dict[str, Any] | None:
        """The checkpoint with `files`: {path: {"before": bytes | None, "after_sha256"}}."""
        rows = self._query("SELECT * FROM checkpoints WHERE proposal_id=?", (proposal_id,))
        if not rows:
            return None
        files = self._query(
            "SELECT path, before, after_sha256 FROM checkpoint_files WHERE proposal_id=?"
            " ORDER BY path",
            (proposal_id,),
        )
        return {
            **dict(rows[0]),
            "files": {
                f["path"]: {"before": f["before"], "after_sha256": f["after_sha256"]} for f in files
            },
        }

    def checkpoints(self, states: tuple[str, ...]) -> list[str]:
        """Proposal ids of checkpoints in `states`, newest first."""
        rows = self._query(
            f"SELECT proposal_id FROM checkpoints WHERE state IN ({','.join('?' * len(states))})"
            " ORDER BY created_at DESC, rowid DESC",
            states,
        )
        return [r[0] for r in rows]

    # -- training / consolidation queue ---------------------------------------------------

    def enqueue_job(self, kind: str, payload: dict[str, Any], held: bool = False) -> int:
        """Queue a job; a `held` one is committed but not claimed until `release_held_job`
        (a decision's job, queued with the decision, whose payload is still being
        completed)."""
        now = time.time()
        with self.transaction() as db:
            cur = db.execute(
                "INSERT INTO jobs(kind, payload, status, created_at, updated_at)"
                " VALUES (?,?,?,?,?)",
                (kind, json.dumps(payload), "held" if held else "pending", now, now),
            )
            job_id = int(cur.lastrowid or 0)
            self._event(db, "job_queued", {"jobId": job_id, "kind": kind, "held": held})
        return job_id

    def release_held_job(self, job_id: int, updates: dict[str, Any] | None = None) -> None:
        """Let the worker claim a held job, with `updates` merged into its payload."""
        with self.transaction() as db:
            row = db.execute(
                "SELECT payload FROM jobs WHERE id=? AND status='held'", (job_id,)
            ).fetchone()
            if row is None:
                return  # released already (crash recovery got there first)
            payload = {**json.loads(row["payload"]), **(updates or {})}
            db.execute(
                "UPDATE jobs SET status='pending', payload=?, updated_at=? WHERE id=?",
                (json.dumps(payload), time.time(), job_id),
            )
            self._event(db, "job_released", {"jobId": job_id, "completed": sorted(updates or {})})

    def held_jobs(self) -> list[int]:
        return [int(r[0]) for r in self._query("SELECT id FROM jobs WHERE status='held'")]

    def claim_job(self, kinds: tuple[str, ...] | None = None) -> dict[str, Any] | None:
        """Take the oldest pending job (or one left `running` by a crash) and mark it running."""
        with self.transaction() as db:
            sql = "SELECT * FROM jobs WHERE status IN ('pending','running')"
            args: tuple[Any, ...] = ()
            if kinds:
                sql += f" AND kind IN ({','.join('?' * len(kinds))})"
                args = kinds
            row = db.execute(sql + " ORDER BY id LIMIT 1", args).fetchone()
            if row is None:
                return None
            db.execute(
                "UPDATE jobs SET status='running', attempts=attempts+1, updated_at=? WHERE id=?",
                (time.time(), row["id"]),
            )
        job = dict(row)
        job["payload"] = json.loads(job["payload"])
        job["attempts"] += 1
        return job

    def finish_job(
        self, job_id: int, result: dict[str, Any] | None = None, error: str | None = None
    ) -> None:
        status = "failed" if error else "done"
        with self.transaction() as db:
            db.execute(
                "UPDATE jobs SET status=?, result=?, error=?, updated_at=? WHERE id=?",
                (status, json.dumps(result or {}), error, time.time(), job_id),
            )
            self._event(db, "job_" + status, {"jobId": job_id, "result": result, "error": error})

    def release_job(self, job_id: int, reason: str) -> None:
        """Put a claimed job back in the queue (its backend is unavailable): kept, not failed."""
        with self.transaction() as db:
            db.execute(
                "UPDATE jobs SET status='pending', error=?, updated_at=? WHERE id=?",
                (reason, time.time(), job_id),
            )
            self._event(db, "job_released", {"jobId": job_id, "reason": reason})

    def job(self, job_id: int) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM jobs WHERE id=?", (job_id,))
        if not rows:
            return None
        job = dict(rows[0])
        for key in ("payload", "result"):
            job[key] = _loads(job[key])
        return job

    def cluster_jobs(
        self, kind: str, cluster: str, before: int, limit: int
    ) -> list[dict[str, Any]]:
        """Payloads of the done `kind` jobs of `cluster` queued before job `before`, newest
        first (what a step replays with its own correction)."""
        rows = self._query(
            "SELECT payload FROM jobs WHERE kind=? AND status='done' AND id<?"
            " AND json_extract(payload, '$.cluster') = ? ORDER BY id DESC LIMIT ?",
            (kind, before, cluster, limit),
        )
        return [json.loads(r["payload"]) for r in rows]

    def has_job_for(self, proposal_id: str) -> bool:
        rows = self._query(
            "SELECT 1 FROM jobs WHERE json_extract(payload, '$.proposal_id') = ? LIMIT 1",
            (proposal_id,),
        )
        return bool(rows)

    def approved_retry(self, proposal_id: str) -> dict[str, Any] | None:
        """The call the reviewer approved after denying `proposal_id` (a ToolCall dump), if any."""
        rows = self._query(
            "SELECT json_extract(payload, '$.demonstration') FROM jobs"
            " WHERE json_extract(payload, '$.proposal_id') = ?"
            " AND json_extract(payload, '$.signal') = 'approved_retry' ORDER BY id LIMIT 1",
            (proposal_id,),
        )
        return _loads(rows[0][0]) if rows and rows[0][0] else None

    def queue_depth(self, kinds: tuple[str, ...] | None = None) -> int:
        sql, args = "SELECT COUNT(*) FROM jobs WHERE status IN ('pending','running')", ()
        if kinds:
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            args = kinds
        return int(self._read(sql, args)[0][0])

    # -- adapters -------------------------------------------------------------------------

    def add_adapter(
        self,
        name: str,
        path: str,
        sha256: str,
        parent: int | None,
        metrics: dict[str, Any],
        source: str = "sdpo",
        active: bool = True,
    ) -> int:
        with self.transaction() as db:
            row = db.execute("SELECT COALESCE(MAX(version), 0) + 1 FROM adapters").fetchone()
            version = int(row[0])
            db.execute(
                "INSERT INTO adapters(version, name, path, sha256, parent, metrics, source,"
                " active, created_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    version,
                    name,
                    path,
                    sha256,
                    parent,
                    json.dumps(metrics),
                    source,
                    int(active),
                    time.time(),
                ),
            )
            self._event(
                db,
                "adapter",
                {"version": version, "name": name, "sha256": sha256, "metrics": metrics},
            )
        return version

    def adapters(self) -> list[dict[str, Any]]:
        rows = self._read("SELECT * FROM adapters ORDER BY version")
        return [{**dict(r), "metrics": json.loads(r["metrics"])} for r in rows]

    def current_adapter(self) -> dict[str, Any] | None:
        """The newest active adapter version; None means the base model."""
        rows = self._read("SELECT * FROM adapters WHERE active=1 ORDER BY version DESC LIMIT 1")
        return {**dict(rows[0]), "metrics": json.loads(rows[0]["metrics"])} if rows else None

    def set_adapter_active(self, version: int, active: bool) -> None:
        with self.transaction() as db:
            db.execute("UPDATE adapters SET active=? WHERE version=?", (int(active), version))
            self._event(db, "adapter_active", {"version": version, "active": active})

    # -- lanes ----------------------------------------------------------------------------

    def add_lane_item(self, item: dict[str, Any]) -> str:
        item_id = item.get("id") or new_id("item")
        with self.transaction() as db:
            db.execute(
                "INSERT INTO lane_items(id, text, lane, reason, confidence, kind, cluster_id, cue,"
                " spec, source, active, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    item_id,
                    item["text"],
                    item["lane"],
                    item["reason"],
                    item.get("confidence", 1.0),
                    item.get("kind"),
                    item.get("cluster_id"),
                    json.dumps(item.get("cue") or {}),
                    json.dumps(item.get("spec") or {}),
                    item.get("source"),
                    int(item.get("active", True)),
                    time.time(),
                ),
            )
            self._event(
                db, "routed", {"itemId": item_id, "lane": item["lane"], "reason": item["reason"]}
            )
        return item_id

    def lane_items(
        self, lane: str | None = None, active_only: bool = False
    ) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM lane_items WHERE 1=1", []
        if lane is not None:
            sql += " AND lane=?"
            args.append(lane)
        if active_only:
            sql += " AND active=1"
        rows = self._query(sql + " ORDER BY created_at", tuple(args))
        return [
            {**dict(r), "cue": json.loads(r["cue"]), "spec": json.loads(r["spec"])} for r in rows
        ]

    def lane_item(self, item_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM lane_items WHERE id=?", (item_id,))
        if not rows:
            return None
        return {
            **dict(rows[0]),
            "cue": json.loads(rows[0]["cue"]),
            "spec": json.loads(rows[0]["spec"]),
        }

    def update_lane_item(self, item_id: str, **fields: Any) -> None:
        allowed = {"lane", "reason", "confidence", "cluster_id", "cue", "spec", "active", "text"}
        unknown = set(fields) - allowed
        if unknown:
            raise StoreError(f"cannot update lane item fields {sorted(unknown)}")
        values = {
            k: json.dumps(v) if k in ("cue", "spec") else (int(v) if k == "active" else v)
            for k, v in fields.items()
        }
        with self.transaction() as db:
            sets = ", ".join(f"{k}=?" for k in values)
            db.execute(f"UPDATE lane_items SET {sets} WHERE id=?", (*values.values(), item_id))
            self._event(db, "lane_item_update", {"itemId": item_id, "fields": sorted(values)})

    def upsert_cluster(
        self, cluster_id: str, label: str, centroid: bytes | None, count: int
    ) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO clusters(id, label, centroid, count, created_at) VALUES (?,?,?,?,?)"
                " ON CONFLICT(id) DO UPDATE SET label=excluded.label, centroid=excluded.centroid,"
                " count=excluded.count",
                (cluster_id, label, centroid, count, time.time()),
            )

    def clusters(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._query("SELECT * FROM clusters ORDER BY created_at")]

    # -- counters -------------------------------------------------------------------------

    def bump(self, name: str, by: float = 1.0) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO counters(name, value) VALUES (?, ?)"
                " ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                (name, by),
            )

    def counter(self, name: str) -> float:
        rows = self._query("SELECT value FROM counters WHERE name=?", (name,))
        return float(rows[0][0]) if rows else 0.0
