"""File changes tried against the task's failing test before a reviewer sees one.

When the task's last test run failed, each candidate change is written into a throw-away
copy of the workspace and the same command runs there, in the one sandbox every bash call
uses (`tools.bash.run_bash`), all candidates of a turn within one time box. The first
candidate that turns the test green is the one to show. The workspace itself is never
touched: a copy is made once per turn, each change written into it and taken back. A
command the reviewer never approved (the workspace's own tests, `run_on_copy`) runs only
on such a copy too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from continual_lsp.agent.candidates import Candidate
from continual_lsp.config import Settings
from continual_lsp.tools.base import ToolError, ToolResult
from continual_lsp.tools.bash import run_bash
from continual_lsp.tools.sandbox import sandbox_status

# A workspace with more files than this is not copied to try changes (node_modules and
# the like would cost more than the check is worth on a turn).
MAX_COPIED_FILES = 5000


@dataclass(frozen=True)
class Trial:
    """What trying the candidates found: the first that passes (None: none did), how many
    ran, and why the trial stopped early (None: it did not)."""

    passed: Candidate | None
    ran: int
    stopped: str | None = None


def _small_enough(root: Path) -> bool:
    count = 0
    for _dir, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        count += len(files)
        if count > MAX_COPIED_FILES:
            return False
    return True


@contextlib.contextmanager
def _copy_of(workspace: Path) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="continual-trial-") as tmp:
        copy = Path(tmp) / workspace.name
        # git's metadata stays out: a test run needs the files, and the copy's hooks and
        # config must not be the workspace's.
        shutil.copytree(workspace, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        yield copy


UNSANDBOXED = "bash runs without a sandbox here: nothing unapproved is run"


def sandboxed(settings: Settings) -> bool:
    """Whether a command or a change no reviewer approved may run on a copy: only where
    bash runs in the sandbox (`sandbox = "none"` is accepted for approved calls only)."""
    return sandbox_status(settings)[0]


def run_on_copy(
    workspace: Path,
    cmd: str,
    settings: Settings,
    *,
    env: Mapping[str, str] | None = None,
    home: str | os.PathLike[str] | None = None,
) -> ToolResult | None:
    """`cmd`'s result on an unchanged copy of `workspace`, within
    `settings.check_timeout_s`; None when it may not run there: too many files to copy,
    or bash unsandboxed (`sandboxed`). `cmd` is one the reviewer never approved (the
    workspace's own test script, a package.json's for one): without the sandbox it could
    read and change anything this user can. Its output names the workspace, not the
    copy's random folder: it may be shown to the model, and paths in it looked up."""
    if not _small_enough(workspace) or not sandboxed(settings):
        return None
    timeout = min(settings.check_timeout_s, float(settings.bash_timeout))
    with _copy_of(workspace) as copy:
        try:
            run = run_bash(cmd, copy, settings, timeout=timeout, env=env, home=home)
        except ToolError:
            return None
    return run.model_copy(update={"output": run.output.replace(str(copy), str(workspace))})


def first_passing(
    workspace: Path,
    cmd: str,
    candidates: Sequence[Candidate],
    settings: Settings,
    *,
    env: Mapping[str, str] | None = None,
    home: str | os.PathLike[str] | None = None,
) -> Trial:
    """Run `cmd` on a copy of `workspace` with each candidate's change (its preview's new
    content) in turn, until one exits 0 or `settings.check_timeout_s` is spent. Only in
    the sandbox (`sandboxed`): the changes are the model's, which no reviewer approved."""
    if not _small_enough(workspace):
        return Trial(None, 0, f"more than {MAX_COPIED_FILES} files to copy")
    if not sandboxed(settings):
        return Trial(None, 0, UNSANDBOXED)
    deadline = time.monotonic() + settings.check_timeout_s
    ran = 0
    with _copy_of(workspace) as copy:
        for candidate in candidates:
            left = deadline - time.monotonic()
            if left < 1:
                return Trial(None, ran, f"time box of {settings.check_timeout_s:g} s spent")
            assert candidate.preview is not None
            target = copy / candidate.preview.path
            before = target.read_bytes() if target.is_file() else None
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(candidate.preview.new_content, encoding="utf-8")
            try:
                timeout = min(left, float(settings.bash_timeout))
                result = run_bash(cmd, copy, settings, timeout=timeout, env=env, home=home)
            except ToolError as exc:
                return Trial(None, ran, str(exc))
            finally:
                if before is None:
                    target.unlink(missing_ok=True)
                else:
                    target.write_bytes(before)
            ran += 1
            if result.ok:
                return Trial(candidate, ran)
    return Trial(None, ran)
