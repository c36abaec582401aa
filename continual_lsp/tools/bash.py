"""The bash tool: one shell command in the workspace, sandboxed unless told otherwise."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Mapping
from pathlib import Path

from continual_lsp.config import Settings
from continual_lsp.tools.base import ToolError, ToolResult
from continual_lsp.tools.process import ProcessResult, run_process
from continual_lsp.tools.sandbox import (
    bwrap_argv,
    home_dir,
    limit_argv,
    process_limit,
    protect_git,
    sandbox_env,
    sandbox_status,
)

__all__ = ["TIMEOUT_EXIT_CODE", "run_bash"]

TIMEOUT_EXIT_CODE = 124  # what coreutils `timeout` reports, so the model knows the sign


def _shell() -> str:
    return shutil.which("bash") or "/bin/sh"


def _explained(
    result: ProcessResult, limit: float, cpu_limit: float, settings: Settings
) -> tuple[str, int | None]:
    """The output with a line on how the command ended when a limit ended it, and the exit
    code the model sees (124 for a timeout, as coreutils `timeout` reports)."""
    output = result.output
    if result.timed_out:
        output += (
            f"\n[timed out after {limit:g} s: the command and every process it started were killed]"
        )
        return output, TIMEOUT_EXIT_CODE
    exit_code = result.exit_code
    if exit_code is not None and exit_code < 0:
        output += f"\n[killed by signal {-exit_code}]"
    # The shell reports a child's death by signal N as 128 + N.
    if exit_code in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        output += (
            f"\n[a file reached the size limit ({settings.bash_file_size_limit_mb} MB,"
            " bash_file_size_limit_mb)]"
        )
    elif exit_code in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        output += f"\n[CPU time limit reached ({cpu_limit:g} s)]"
    return output, exit_code


def _removed_note(removed: list[str]) -> str:
    return (
        f"\n[refused: the command made a git repository at {', '.join(removed)}; it was"
        " removed (the host's git would run the programs its config and hooks name)]"
    )


def run_bash(
    cmd: str,
    workspace: str | os.PathLike[str],
    settings: Settings,
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    home: str | os.PathLike[str] | None = None,
) -> ToolResult:
    """Run `cmd` with bash in `workspace`; stdout and stderr merged, capped, never inherited.

    Sandboxed under bwrap when `sandbox_status(settings)` says so; without a sandbox
    it runs only if the settings allow it (sandbox = "none" or allow_unsandboxed),
    else ToolError. `env` defaults to this process's environment; `home` (default
    $HOME of `env`) is the home directory whose secrets the sandbox hides. The whole
    process group is SIGKILLed at the timeout (default settings.bash_timeout); every
    process runs under rlimits (CPU time, file size, optionally address space).
    """
    root = Path(os.path.realpath(workspace))
    if not root.is_dir():
        raise ToolError(f"workspace {os.fspath(workspace)!r} is not a directory")
    sandboxed, note = sandbox_status(settings)
    if not sandboxed and settings.sandbox != "none" and not settings.allow_unsandboxed:
        raise ToolError(note or "bash cannot run without a sandbox")
    limit = float(timeout if timeout is not None else settings.bash_timeout)
    base_env = dict(os.environ if env is None else env)
    memory_mb = settings.bash_memory_limit_mb
    # CPU seconds per process = what all cores give in the wall limit: never reached
    # before the timeout by a multi-threaded process in the group, it bounds one that
    # left the group (setsid, unsandboxed) and so outlives the timeout's kill.
    cpu_limit = limit * (os.cpu_count() or 1)
    argv = limit_argv(
        [_shell(), "-c", cmd],
        cpu_seconds=cpu_limit,
        memory_limit_bytes=memory_mb << 20 if memory_mb is not None else None,
        file_size_bytes=settings.bash_file_size_limit_mb << 20,
        processes=settings.bash_max_processes if sandboxed else None,
    )
    try:
        with (
            protect_git([root] if sandboxed else []) as guard,
            process_limit(settings.bash_max_processes) as join_cgroup,
        ):
            if sandboxed:
                argv = bwrap_argv(
                    argv,
                    workdir=root,
                    writable_dirs=[root],
                    allow_network=settings.allow_network,
                    home=home if home is not None else home_dir(base_env),
                    protected=list(guard.protected),
                    frozen=guard.frozen,
                    hidden=settings.sandbox_hidden_paths,
                    env=base_env,
                    tmp_size_bytes=settings.bash_tmp_size_mb << 20,
                    bwrap=shutil.which("bwrap") or "bwrap",
                )
                base_env = sandbox_env(base_env, [root])
            result = run_process(
                [*join_cgroup, *argv],
                cwd=root,
                timeout=limit,
                output_cap=settings.output_cap,
                env=base_env,
            )
    except OSError as exc:
        raise ToolError(f"cannot start the shell: {exc}") from exc

    output, exit_code = _explained(result, limit, cpu_limit, settings)
    if guard.removed:
        output += _removed_note(guard.removed)
        exit_code = exit_code or 1
    if not output.strip():
        output = "(no output)"
    return ToolResult(
        ok=exit_code == 0,
        output=output,
        truncated=result.truncated,
        exit_code=exit_code,
    )
