"""Checkpoints and undo without git: what every applied change replaced, in the store.

A file change commits the file's bytes before it runs; a bash call commits an open
checkpoint, keeps a snapshot of the workspace in memory while it runs, then commits the
files it changed (their bytes before, their hashes after). A change is found by content,
not by size and mtime, which a command can keep (`touch -r`). Undo puts the bytes back
only when every file still holds what the change left there: newer work is never
overwritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from continual_lsp.store import Store
from continual_lsp.tools.base import ToolError
from continual_lsp.tools.runner import ToolRunner, sha256_of

# Directories a bash snapshot does not walk: tools' caches and installed dependencies
# (rebuilt, not authored), and git's own database.
SKIP_DIRS = frozenset(
    {
        ".git",
        "node_modules",
        ".venv",
        "venv",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
    }
)
MAX_FILE_BYTES = 1024 * 1024  # larger files are hashed, not kept: a change cannot be undone
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
MAX_HASHED_BYTES = 512 * 1024 * 1024  # past this, files are watched by size and mtime only


class UndoError(Exception):
    """An undo that cannot be done; the message names the file and says why."""


@dataclass
class Snapshot:
    """The workspace before a bash call: (size, mtime) per file, bytes of the small ones,
    sha256 of the larger ones (within MAX_HASHED_BYTES)."""

    stats: dict[str, tuple[int, int]] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)
    hashes: dict[str, str | None] = field(default_factory=dict)


def _walk(root: Path) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for name in files:
            path = Path(folder, name)
            with contextlib.suppress(OSError):
                st = path.lstat()
                if path.is_symlink() or not path.is_file():
                    continue
                out[path.relative_to(root).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None


class Checkpoints:
    def __init__(self, store: Store, workspace: ToolRunner) -> None:
        self.store = store
        self.workspace = workspace

    # -- before and after a change --------------------------------------------------------

    def before_file(self, proposal_id: str, rel: str) -> None:
        self.store.open_checkpoint(proposal_id, "file", {rel: _read(self.workspace.resolve(rel))})

    def after_file(self, proposal_id: str, rel: str, ok: bool) -> None:
        if not ok:
            self.store.set_checkpoint_state(proposal_id, "failed")
            return
        after = sha256_of(self.workspace.resolve(rel))
        self.store.seal_checkpoint(proposal_id, {rel: (None, after)})

    def before_bash(self, proposal_id: str) -> Snapshot:
        self.store.open_checkpoint(proposal_id, "bash", {})
        snap = Snapshot(stats=_walk(self.workspace.root))
        budget, hash_budget = MAX_SNAPSHOT_BYTES, MAX_HASHED_BYTES
        for rel, (size, _mtime) in snap.stats.items():
            if size <= MAX_FILE_BYTES and size <= budget:
                data = _read(self.workspace.root / rel)
                if data is not None:
                    snap.data[rel] = data
                    budget -= len(data)
            elif size <= hash_budget:
                snap.hashes[rel] = sha256_of(self.workspace.root / rel)
                hash_budget -= size
        return snap

    def after_bash(self, proposal_id: str, snap: Snapshot) -> list[str]:
        """Commit the files the command changed; returns those it could not snapshot."""
        root = self.workspace.root
        now = _walk(root)
        changed: dict[str, tuple[bytes | None, str | None]] = {}
        unknown: list[str] = []
        for rel in sorted(set(snap.stats) | set(now)):
            before = snap.data.get(rel)
            if rel in snap.stats and before is None:
                # Too large to keep: a change is seen (by hash when one was taken) but
                # cannot be undone.
                same_stat = snap.stats[rel] == now.get(rel)
                if rel in snap.hashes:
                    if snap.hashes[rel] != sha256_of(root / rel):
                        unknown.append(rel)
                elif not same_stat:
                    unknown.append(rel)
                continue
            after = sha256_of(root / rel) if rel in now else None
            if before is not None and after == hashlib.sha256(before).hexdigest():
                continue
            changed[rel] = (before, after)
        note = f"not snapshotted (too large): {', '.join(unknown)}" if unknown else None
        self.store.seal_checkpoint(
            proposal_id, changed, state="partial" if unknown else "applied", note=note
        )
        return unknown

    # -- undo ---------------------------------------------------------------------------

    def latest(self) -> str | None:
        """The newest checkpoint of a change that changed something (a bash call that
        changed no file is not one)."""
        for proposal_id in self.store.checkpoints(("applied", "partial")):
            cp = self.store.checkpoint(proposal_id)
            if cp is not None and (cp["files"] or cp["state"] == "partial"):
                return proposal_id
        return None

    def check(self, proposal_id: str) -> dict[str, bytes | None]:
        """The bytes to put back per path; UndoError unless every file is as the change
        left it."""
        cp = self.store.checkpoint(proposal_id)
        if cp is None:
            raise UndoError(f"proposal {proposal_id!r} changed no file: nothing to undo")
        state = cp["state"]
        if state == "undone":
            raise UndoError(f"proposal {proposal_id!r} was already undone")
        if state == "partial":
            raise UndoError(f"proposal {proposal_id!r} cannot be undone: {cp['note']}")
        if state != "applied":
            raise UndoError(f"proposal {proposal_id!r} was not applied ({state}): nothing to undo")
        if not cp["files"]:
            raise UndoError(f"proposal {proposal_id!r} changed no file: nothing to undo")
        restore: dict[str, bytes | None] = {}
        changed: list[str] = []
        for rel, entry in cp["files"].items():
            try:
                current = sha256_of(self.workspace.resolve(rel))
            except ToolError as exc:
                raise UndoError(f"cannot undo {rel}: {exc}") from exc
            if current != entry["after_sha256"]:
                changed.append(rel)
            restore[rel] = entry["before"]
        if changed:
            raise UndoError(
                f"cannot undo proposal {proposal_id}: {', '.join(changed)} changed since it was "
                "applied; nothing was restored (undo the later change first, or restore by hand)"
            )
        return restore

    def restore(self, proposal_id: str, files: dict[str, bytes | None]) -> list[str]:
        """Put the bytes back (the decision to undo is already committed)."""
        self.store.set_checkpoint_state(proposal_id, "undoing")
        for rel, before in files.items():
            path = self.workspace.resolve(rel)
            if before is None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".undo", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(before)
                with contextlib.suppress(FileNotFoundError):
                    os.chmod(tmp, path.stat().st_mode & 0o7777)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        self.store.set_checkpoint_state(proposal_id, "undone")
        return sorted(files)

    def recover(self) -> None:
        """An undo a crash interrupted: finish it file by file, skipping any file that
        holds neither the change's result nor the original (newer work)."""
        for proposal_id in self.store.checkpoints(("undoing",)):
            cp = self.store.checkpoint(proposal_id)
            assert cp is not None
            todo = {}
            for rel, entry in cp["files"].items():
                current = sha256_of(self.workspace.resolve(rel))
                if current == entry["after_sha256"]:
                    todo[rel] = entry["before"]
            self.restore(proposal_id, todo)
