"""Run generated guard code in a sandboxed subprocess, never in the server process.

Layers, outermost first:
- bubblewrap (when installed): read-only view of /, a private writable temp dir, no
  network namespace (`--unshare-net`), own PID namespace, dies with its parent;
- resource limits set in the child before exec: address space, CPU seconds, file size,
  process count; plus a wall-clock timeout after which the whole process group is killed;
- inside the interpreter an audit hook refuses sockets, subprocesses and writes outside
  the temp dir, so a refusal comes back as a clear error rather than only an EPERM.

Without bubblewrap the audit hook + rlimits still apply, but that is not a security
boundary, so generated guards are refused unless `allow_unsandboxed=True`.

The process sandbox itself is `continual_lsp.tools.sandbox.run_sandboxed` (bwrap layout,
secrets hidden, rlimits); this module adds the guard protocol (JSON in, JSON out) and the
audit hook, and keeps a minimal runner of its own for when the tools part is absent.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

MEMORY_LIMIT = 512 * 1024 * 1024
OUTPUT_CAP = 64 * 1024

_RUNNER = r"""
import json, os, sys
TMP = os.path.realpath(sys.argv[1])

def _hook(event, args):
    if event in ("socket.connect", "socket.bind", "socket.__new__", "socket.getaddrinfo",
                 "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork",
                 "ctypes.dlopen", "os.kill"):
        raise PermissionError(f"sandbox: {event} is not allowed in a guard")
    if event == "open" and len(args) > 1:
        path, mode = args[0], args[1]
        writing = isinstance(mode, str) and any(c in mode for c in "wax+")
        if isinstance(mode, int):
            writing = bool(mode & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        if mode is None and len(args) > 2 and isinstance(args[2], int):
            writing = bool(args[2] & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        if writing and isinstance(path, (str, bytes)):
            p = os.path.realpath(os.fsdecode(path))
            if not (p == TMP or p.startswith(TMP + os.sep)):
                raise PermissionError(f"sandbox: write outside the temp dir: {p}")
    if event in ("os.remove", "os.rename", "os.mkdir", "os.rmdir", "shutil.rmtree"):
        p = os.path.realpath(os.fsdecode(args[0])) if args and isinstance(args[0], (str, bytes)) else ""
        if not p.startswith(TMP + os.sep):
            raise PermissionError(f"sandbox: {event} outside the temp dir")

payload = json.loads(sys.stdin.read())
code = payload["code"]
sys.addaudithook(_hook)
ns = {"__name__": "guard"}
try:
    exec(compile(code, "<guard>", "exec"), ns)
    value = ns["check"](payload["input"]["call"], payload["input"]["preview"])
    out = {"ok": True, "value": value}
except BaseException as exc:
    out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
sys.__stdout__.write("\n@@RESULT@@" + json.dumps(out, default=str))
sys.__stdout__.flush()
"""


class SandboxResult(BaseModel):
    ok: bool
    value: Any = None
    error: str = ""
    sandboxed: bool = False


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _limits(timeout_s: float, memory: int) -> Any:
    def apply() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        cpu = max(1, int(timeout_s) + 1)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # Ask the kernel to kill the child if the server dies (Linux only).
        try:
            import ctypes

            ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass

    return apply


def run_guard_code(
    code: str,
    payload: dict[str, Any],
    *,
    timeout_s: float = 2.0,
    memory: int = MEMORY_LIMIT,
    allow_unsandboxed: bool = False,
) -> SandboxResult:
    """Run `check(call, preview)` from `code` in a fresh, limited interpreter."""
    with tempfile.TemporaryDirectory(prefix="guard-") as tmp:
        tmp_real = os.path.realpath(tmp)
        runner = Path(tmp_real) / "runner.py"
        runner.write_text(_RUNNER)
        argv = [sys.executable, "-I", "-S", str(runner), tmp_real]
        stdin = json.dumps({"code": code, "input": payload}).encode()
        env = {"PATH": "/usr/bin:/bin", "TMPDIR": tmp_real, "HOME": tmp_real}
        try:
            from continual_lsp.tools.sandbox import run_sandboxed
        except ImportError:  # the tools part is optional for the lanes: use our own runner
            return _run_local(argv, stdin, env, tmp_real, timeout_s, memory, allow_unsandboxed)
        try:
            res = run_sandboxed(
                argv,
                tmp_real,
                timeout_s,
                memory,
                False,
                [tmp_real],
                stdin_data=stdin,
                env=env,
                home=tmp_real,
                output_cap=OUTPUT_CAP,
                allow_unsandboxed=allow_unsandboxed,
                file_size_limit_bytes=1 << 20,
            )
        except Exception as exc:  # ToolError: no sandbox here; refuse rather than run bare
            return SandboxResult(ok=False, error=f"guard refused: {exc}")
        if res.timed_out:
            return SandboxResult(ok=False, error=f"guard timed out after {timeout_s:.1f}s")
        return _parse(res.output, res.stderr, res.exit_code, res.sandboxed)


def _parse(out: str, err: str, code: int | None, sandboxed: bool) -> SandboxResult:
    marker = out.rfind("\n@@RESULT@@")
    if marker < 0:
        reason = err.strip()[-500:] or f"exit {code}"
        if code is not None and code < 0:
            reason = f"killed by signal {-code}; {reason}"
        return SandboxResult(ok=False, error=f"guard died: {reason}", sandboxed=sandboxed)
    try:
        result = json.loads(out[marker + len("\n@@RESULT@@") :])
    except json.JSONDecodeError as exc:
        return SandboxResult(ok=False, error=f"guard answered non-JSON: {exc}")
    return SandboxResult(
        ok=bool(result.get("ok")),
        value=result.get("value"),
        error=str(result.get("error", "")),
        sandboxed=sandboxed,
    )


def _run_local(
    py: list[str],
    stdin: bytes,
    env: dict[str, str],
    tmp_real: str,
    timeout_s: float,
    memory: int,
    allow_unsandboxed: bool,
) -> SandboxResult:
    bwrap = bwrap_path()
    if bwrap is None and not allow_unsandboxed:
        return SandboxResult(ok=False, error="no bubblewrap: generated guards are refused")
    if bwrap is not None:
        argv = [
            bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--bind", tmp_real, tmp_real, "--chdir", tmp_real,
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--die-with-parent",
            "--new-session", *py,
        ]  # fmt: skip
    else:
        argv = py
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=tmp_real,
            env=env,
            preexec_fn=_limits(timeout_s, memory),
        )
    except OSError as exc:
        return SandboxResult(ok=False, error=f"could not start the sandbox: {exc}")
    try:
        out, err = proc.communicate(stdin, timeout=timeout_s + 1.0)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        proc.communicate()
        return SandboxResult(ok=False, error=f"guard timed out after {timeout_s:.1f}s")
    return _parse(
        out[-OUTPUT_CAP:].decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        proc.returncode,
        bwrap is not None,
    )
