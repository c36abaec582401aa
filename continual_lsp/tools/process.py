"""Run a child process in its own process group, with a timeout and bounded output.

The language server speaks its protocol on fd 1, so a child never inherits the
server's stdout or stdin: stdin is /dev/null (or a pipe we feed), stdout and stderr
are pipes read here. On timeout the whole process group is killed with SIGKILL, and
when the command itself exits, whatever it left running in the background is killed
too: nothing a tool starts outlives the call.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from continual_lsp.tools.output import CappedBytes

__all__ = ["ProcessResult", "kill_group", "run_process"]

# After the command exits (or is killed) we read what is left in the pipes for at most
# this long: a process that escaped the group (setsid) may hold them open for ever.
_DRAIN_S = 1.0


@dataclass
class ProcessResult:
    exit_code: int | None  # None only if the process could not be reaped
    output: str  # stdout (merged with stderr unless separated)
    stderr: str  # "" when merged
    truncated: bool
    timed_out: bool
    seconds: float


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group; a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Has the child exited? Checked WITHOUT reaping it.

    While the exited leader stays a zombie its pid, and so the process group id, cannot
    be reused: the killpg that follows can only reach this command's own processes.
    """
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # already reaped


def _feed(pipe: IO[bytes], data: bytes) -> None:
    # A child that does not read (all of) its input is not an error.
    with contextlib.suppress(OSError, ValueError):
        pipe.write(data)
    with contextlib.suppress(OSError, ValueError):
        pipe.close()


def _pump(
    proc: subprocess.Popen[bytes],
    pgid: int,
    sel: selectors.BaseSelector,
    buffers: dict[int, CappedBytes],
    deadline: float,
) -> bool:
    """Read the pipes into `buffers` until the command is done (its leftover children
    killed, the pipes drained) or `deadline`; whether it timed out."""
    drain_until: float | None = None
    timed_out = False
    while sel.get_map():
        now = time.monotonic()
        if drain_until is None:
            if _exited(proc):
                # The command is done; background children it left are not wanted.
                kill_group(pgid)
                drain_until = now + _DRAIN_S
            elif now >= deadline:
                timed_out = True
                kill_group(pgid)
                drain_until = now + _DRAIN_S
        elif now >= drain_until:
            break
        limit = drain_until if drain_until is not None else deadline
        for key, _ in sel.select(timeout=max(0.0, min(limit - now, 0.05))):
            fd = int(key.fd)
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                buffers[fd].add(data)
            else:
                sel.unregister(fd)
    if drain_until is None:
        # Every pipe closed but the command still runs (it closed its output): it
        # still gets the rest of its time.
        while not _exited(proc):
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(0.02)
    return timed_out


def run_process(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    timeout: float,
    output_cap: int,
    env: Mapping[str, str] | None = None,
    stdin_data: bytes | None = None,
    merge_stderr: bool = True,
) -> ProcessResult:
    """Run `argv` to completion or `timeout` seconds, whichever comes first.

    Raises OSError if the program cannot be started (caller turns it into a ToolError).
    """
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=os.fspath(cwd),
        env=dict(env) if env is not None else None,
        stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        start_new_session=True,  # its own process group: killpg reaches every child
        close_fds=True,
    )
    pgid = proc.pid  # start_new_session makes the child a group leader
    feeder: threading.Thread | None = None
    if stdin_data is not None:
        feeder = threading.Thread(target=_feed, args=(proc.stdin, stdin_data), daemon=True)
        feeder.start()

    buffers: dict[int, CappedBytes] = {}
    sel = selectors.DefaultSelector()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            os.set_blocking(pipe.fileno(), False)
            buffers[pipe.fileno()] = CappedBytes(output_cap)
            sel.register(pipe.fileno(), selectors.EVENT_READ)

    try:
        timed_out = _pump(proc, pgid, sel, buffers, start + timeout)
    finally:
        sel.close()
        kill_group(pgid)  # before reaping the leader: see _exited
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        try:
            exit_code: int | None = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            exit_code = None
        if feeder is not None:
            feeder.join(timeout=1)

    fds = list(buffers)  # stdout first, then stderr when separated
    out_text, out_cut = buffers[fds[0]].text(output_cap)
    err_text, err_cut = ("", False) if merge_stderr else buffers[fds[1]].text(output_cap)
    return ProcessResult(
        exit_code=exit_code,
        output=out_text,
        stderr=err_text,
        truncated=out_cut or err_cut,
        timed_out=timed_out,
        seconds=time.monotonic() - start,
    )
