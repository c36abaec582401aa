"""Run generated guard code in the tools' sandbox, never in the server process.

Layers, outermost first:
- the tools' sandbox (`continual_lsp.tools.sandbox.run_sandboxed`): bubblewrap with a
  read-only view of /, a private writable temp dir, no network, own PID namespace,
  home secrets hidden, rlimits (address space, CPU seconds, file size, process count)
  and a wall-clock timeout after which the whole process group is killed;
- inside the interpreter an audit hook refuses sockets, subprocesses and writes outside
  the temp dir, so a refusal comes back as a clear error rather than only an EPERM.

Without bubblewrap the audit hook + rlimits still apply, but that is not a security
boundary, so generated guards are refused unless `allow_unsandboxed=True`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from continual_lsp.tools.base import ToolError
from continual_lsp.tools.sandbox import run_sandboxed

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


class GuardCodeResult(BaseModel):
    ok: bool
    value: Any = None
    error: str = ""
    sandboxed: bool = False


def _interpreter_dirs() -> list[str]:
    """Where this interpreter lives, bound read-only into the sandbox: a virtualenv
    under /tmp is otherwise hidden by the sandbox's private /tmp, and every guard
    would die before it ran (and so fail open)."""
    dirs = {sys.prefix, sys.base_prefix, os.path.dirname(sys.executable)}
    dirs.add(os.path.dirname(os.path.realpath(sys.executable)))
    return sorted(d for d in dirs if os.path.isdir(d))


def run_guard_code(
    code: str,
    payload: dict[str, Any],
    *,
    timeout_s: float = 2.0,
    memory: int = MEMORY_LIMIT,
    allow_unsandboxed: bool = False,
) -> GuardCodeResult:
    """Run `check(call, preview)` from `code` in a fresh, limited interpreter."""
    with tempfile.TemporaryDirectory(prefix="guard-") as tmp:
        tmp_real = os.path.realpath(tmp)
        runner = Path(tmp_real) / "runner.py"
        runner.write_text(_RUNNER)
        argv = [sys.executable, "-I", "-S", str(runner), tmp_real]
        stdin = json.dumps({"code": code, "input": payload}).encode()
        env = {"PATH": "/usr/bin:/bin", "TMPDIR": tmp_real, "HOME": tmp_real}
        try:
            res = run_sandboxed(
                argv,
                tmp_real,
                timeout_s,
                memory,
                False,
                [tmp_real],
                readable_dirs=_interpreter_dirs(),
                stdin_data=stdin,
                env=env,
                home=tmp_real,
                output_cap=OUTPUT_CAP,
                allow_unsandboxed=allow_unsandboxed,
                file_size_limit_bytes=1 << 20,
            )
        except ToolError as exc:  # no sandbox here: refuse rather than run bare
            return GuardCodeResult(ok=False, error=f"guard refused: {exc}")
        if res.timed_out:
            return GuardCodeResult(ok=False, error=f"guard timed out after {timeout_s:.1f}s")
        return _parse(res.output, res.stderr, res.exit_code, res.sandboxed)


def _parse(out: str, err: str, code: int | None, sandboxed: bool) -> GuardCodeResult:
    marker = out.rfind("\n@@RESULT@@")
    if marker < 0:
        reason = err.strip()[-500:] or f"exit {code}"
        if code is not None and code < 0:
            reason = f"killed by signal {-code}; {reason}"
        return GuardCodeResult(ok=False, error=f"guard died: {reason}", sandboxed=sandboxed)
    try:
        result = json.loads(out[marker + len("\n@@RESULT@@") :])
    except json.JSONDecodeError as exc:
        return GuardCodeResult(ok=False, error=f"guard answered non-JSON: {exc}")
    return GuardCodeResult(
        ok=bool(result.get("ok")),
        value=result.get("value"),
        error=str(result.get("error", "")),
        sandboxed=sandboxed,
    )
