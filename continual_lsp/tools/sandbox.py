"""Run commands under bubblewrap (`bwrap`): the workspace writable, everything else not.

Layout inside the sandbox, in mount order (later mounts cover earlier ones):

1. ``--ro-bind / /``: the whole file system, read-only;
2. ``--dev /dev``, ``--proc /proc``: a private /dev and a /proc of the new pid namespace;
3. ``--tmpfs /tmp``: a private, empty /tmp;
4. home-directory secrets (``~/.ssh``, ``~/.aws``, ``~/.config``, …) and host daemon
   sockets covered by an empty tmpfs or /dev/null;
5. the writable directories (the workspace) bound read-write. They come after /tmp
   and the secret covers so that a workspace under /tmp or under ~/.config stays
   visible and writable; a secret path *inside* a writable directory is covered again
   after the bind;
6. git's metadata read-only (`git_protected_paths`): the ``.git`` entry of a writable
   directory and every hooks directory its config places inside it. Hooks, config
   (``core.fsmonitor``, aliases) and a swapped-in ``.git`` all name programs that git
   later runs on the host, outside any sandbox. A bind mount cannot be renamed or
   removed, so ``mv .git .g && mkdir .git`` fails too; a missing ``.git`` gets an empty
   placeholder directory for the length of the call (git ignores an empty ``.git``)
   so that none can be created (`protect_git`).

Namespaces: pid, ipc, uts always; network unless allowed. ``--cap-drop ALL`` matters
when the server runs as root: without it, root inside the sandbox keeps
CAP_SYS_ADMIN and can simply remount / read-write. ``--die-with-parent`` ends the
sandbox if the server dies.

Whether bwrap works here (installed, user namespaces allowed) is probed once and
cached. The caller decides what a missing sandbox means: `sandbox_status` says it in
words, and nothing runs unsandboxed unless `allow_unsandboxed` is set.

Over 500 lines on purpose: the mount order above is one security argument, and every
step of it (secrets, git metadata, limits, the probe) is here to be read as one.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from continual_lsp.config import Settings
from continual_lsp.tools.base import ToolError
from continual_lsp.tools.process import ProcessResult, run_process

__all__ = [
    "HOST_SOCKETS",
    "SECRET_HOME_PATHS",
    "SECRET_SYSTEM_PATHS",
    "SandboxResult",
    "bwrap_argv",
    "bwrap_available",
    "git_protected_paths",
    "home_dir",
    "host_sockets",
    "limit_argv",
    "process_limit",
    "process_limit_note",
    "protect_git",
    "run_sandboxed",
    "sandbox_env",
    "sandbox_status",
    "scrub_env",
]

# Relative to the home directory. Directories get an empty tmpfs, files /dev/null.
SECRET_HOME_PATHS: tuple[str, ...] = (
    ".ssh",
    ".aws",
    ".config",
    ".gnupg",
    ".netrc",
    ".docker",
    ".kube",
    ".azure",
    ".gcloud",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".password-store",
    ".local/share/keyrings",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".terraform.d",
    ".vault-token",
    ".pgpass",
    ".my.cnf",
    ".gem/credentials",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".mozilla",
    ".cache/huggingface/token",
    ".cache/huggingface/stored_tokens",
    ".huggingface",
    ".claude",
    ".claude.json",
    ".codex",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".ivy2/.credentials",
    ".composer/auth.json",
    ".boto",
    ".s3cfg",
    ".oci",
    ".pulumi",
    ".terraformrc",
)

# Host files that hold credentials; readable inside the sandbox when the server runs
# as root (cap-drop does not take away plain file permissions of uid 0).
SECRET_SYSTEM_PATHS: tuple[str, ...] = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
)

# Unix sockets are reachable through a read-only bind and are not cut off by a new
# network namespace; a daemon socket (docker above all) is a way out of any sandbox.
HOST_SOCKETS: tuple[str, ...] = (
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/dbus/system_bus_socket",
    # Per-user runtime dirs hold the ssh-agent, gpg-agent and session D-Bus sockets.
    "/run/user",
)

# Environment variables whose names suggest a credential are not passed in, nor any
# whose value is a URL with a password (DATABASE_URL=postgres://app:pw@db/prod).
_SECRET_ENV = re.compile(
    r"(TOKEN|SECRET|PASSW|API_?KEY|ACCESS_?KEY|CREDENTIAL|PRIVATE|AUTH|SESSION_KEY|COOKIE"
    r"|(^|_)(KEY|SK|PAT)$)",
    re.IGNORECASE,
)
_URL_WITH_PASSWORD = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@", re.IGNORECASE)
_SECRET_ENV_NAMES = frozenset({"SSH_AUTH_SOCK", "GPG_AGENT_INFO", "KRB5CCNAME", "NETRC"})


@dataclass
class SandboxResult(ProcessResult):
    sandboxed: bool = True


def home_dir(env: Mapping[str, str] | None = None) -> Path:
    """The home directory whose secrets are hidden: $HOME of `env`, else of this process."""
    source = os.environ if env is None else env
    home = source.get("HOME") or os.path.expanduser("~")
    return Path(home)


def scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without variables that look like credentials or agent sockets."""
    return {
        name: value
        for name, value in env.items()
        if name not in _SECRET_ENV_NAMES
        and not _SECRET_ENV.search(name)
        and not _URL_WITH_PASSWORD.match(value)
    }


def host_sockets(env: Mapping[str, str] | None = None) -> list[Path]:
    """Daemon sockets to cover: the listed ones, those named by DOCKER_HOST or
    CONTAINER_HOST, and every socket file under /run (a docker, containerd or podman
    socket at an unlisted path is as much a way out as a listed one)."""
    source = os.environ if env is None else env
    found = [Path(p) for p in HOST_SOCKETS]
    for name in ("DOCKER_HOST", "CONTAINER_HOST"):
        value = source.get(name, "")
        if value.startswith("unix://"):
            found.append(Path(value.removeprefix("unix://")))
    seen = 0
    for current, dirnames, filenames in os.walk("/run"):
        # /run/user is covered whole; the depth and count bounds keep this cheap.
        dirnames[:] = [d for d in dirnames if current != "/run" or d != "user"]
        if current.count("/") >= 5:
            dirnames.clear()
        for name in filenames:
            seen += 1
            path = Path(current) / name
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    found.append(path)
        if seen > 5000:
            break
    return found


def sandbox_env(
    env: Mapping[str, str], writable_dirs: Sequence[str | os.PathLike[str]]
) -> dict[str, str]:
    """The environment inside the sandbox: credentials scrubbed, TMPDIR writable.

    A TMPDIR outside every writable directory would be read-only in there, and tools
    that need a temp file would fail: it is pointed at the private /tmp instead.
    """
    out = scrub_env(env)
    tmpdir = out.get("TMPDIR")
    if tmpdir is not None:
        real = Path(os.path.realpath(tmpdir))
        inside_tmp = _inside(real, Path("/tmp"))
        writable = any(_inside(real, Path(os.path.realpath(d))) for d in writable_dirs)
        if not (inside_tmp or writable):
            out["TMPDIR"] = "/tmp"
    return out


def _inside(path: Path, parent: Path) -> bool:
    return path == parent or path.is_relative_to(parent)


def _cover(path: Path) -> list[str]:
    # A symlinked secret is covered where it points (bwrap mounts onto the target).
    if path.is_dir():
        return ["--tmpfs", str(path)]
    if path.exists():
        return ["--ro-bind", "/dev/null", str(path)]
    return []


def _git_dirs(root: Path) -> list[Path]:
    """The git directories whose config applies to a work tree at `root`."""
    dot_git = root / ".git"
    if dot_git.is_dir():
        return [dot_git]
    try:
        line = dot_git.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return []
    if not line.startswith("gitdir:"):
        return []
    gitdir = (root / line.removeprefix("gitdir:").strip()).resolve()
    dirs = [gitdir]
    with contextlib.suppress(OSError):
        common = (gitdir / "commondir").read_text(encoding="utf-8").strip()
        dirs.append((gitdir / common).resolve())
    return dirs


def _hooks_paths(root: Path) -> list[str]:
    """Every `core.hooksPath` set in the repository's own config files.

    Read with `git config --file`, which parses one file and never runs anything (no
    repository discovery, no hooks, no fsmonitor).
    """
    git = shutil.which("git")
    if git is None:
        return []
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1"}
    found: list[str] = []
    for gitdir in _git_dirs(root):
        for name in ("config", "config.worktree"):
            config = gitdir / name
            if not config.is_file():
                continue
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                out = subprocess.run(
                    [git, "config", "--file", str(config), "--get-all", "core.hooksPath"],
                    capture_output=True,
                    env=env,
                    timeout=5,
                    check=False,
                )
                found += out.stdout.decode("utf-8", "replace").splitlines()
    return found


def git_protected_paths(root: str | os.PathLike[str]) -> list[Path]:
    """Paths under `root` that name programs the host's git runs: read-only in the sandbox.

    `.git` itself, and each configured hooks directory inside `root` (husky's
    `.husky/_` protects `.husky`, whose scripts `_` sources).
    """
    top = Path(os.path.realpath(root))
    paths = [top / ".git"]
    for value in _hooks_paths(top):
        hooks = Path(os.path.realpath(top / os.path.expanduser(value.strip())))
        if hooks.name == "_":
            hooks = hooks.parent
        if hooks != top and _inside(hooks, top) and hooks not in paths:
            paths.append(hooks)
    return paths


@contextlib.contextmanager
def protect_git(writable_dirs: Sequence[str | os.PathLike[str]]) -> Iterator[list[Path]]:
    """The paths to bind read-only for a sandbox writing `writable_dirs`.

    A protected path that does not exist yet gets an empty placeholder directory for
    the length of the block, so the sandbox cannot create it; placeholders (and any
    parent made for them) are removed afterwards if still empty.
    """
    made: list[Path] = []
    paths: list[Path] = []
    try:
        for d in writable_dirs:
            for path in git_protected_paths(d):
                if not path.exists() and not path.is_symlink():
                    missing = [path, *(p for p in path.parents if not p.exists())]
                    try:
                        path.mkdir(parents=True)
                    except OSError:
                        continue  # a work tree this process cannot write: nor can bash
                    made += reversed(missing)
                if not path.is_symlink():
                    paths.append(path)
        yield paths
    finally:
        for path in reversed(made):
            with contextlib.suppress(OSError):
                path.rmdir()


def bwrap_argv(
    argv: Sequence[str],
    *,
    workdir: str | os.PathLike[str],
    writable_dirs: Sequence[str | os.PathLike[str]],
    allow_network: bool,
    home: str | os.PathLike[str] | None = None,
    readable_dirs: Sequence[str | os.PathLike[str]] = (),
    protected: Sequence[str | os.PathLike[str]] = (),
    hidden: Sequence[str | os.PathLike[str]] = (),
    hide_secrets: bool = True,
    env: Mapping[str, str] | None = None,
    tmp_size_bytes: int = 64 << 20,
    bwrap: str = "bwrap",
) -> list[str]:
    """The full bwrap command line that runs `argv` in `workdir` inside the sandbox.

    `readable_dirs` are bound read-only (needed for paths under /tmp, which is private
    otherwise). `home` is the home directory whose secrets are hidden (default $HOME).
    `protected` paths inside the writable dirs are bound read-only over them (see
    `protect_git`). `hidden` paths are covered like the home secrets, even without
    `hide_secrets`. `env` (default: this process's) is the command's environment,
    whose DOCKER_HOST socket is covered too. The private /tmp holds at most
    `tmp_size_bytes` (it is RAM).
    """
    writable = [Path(os.path.realpath(d)) for d in writable_dirs]
    readable = [Path(os.path.realpath(d)) for d in readable_dirs]
    for d in (*writable, *readable):
        if not d.is_dir():
            raise ToolError(f"sandbox: {d} is not a directory")
    cwd = Path(os.path.realpath(workdir))
    if not any(_inside(cwd, d) for d in (*writable, *readable)):
        readable.append(cwd)  # the working directory must exist inside the sandbox

    covers_before: list[str] = []
    covers_after: list[str] = []
    targets = [Path(os.path.realpath(h)) for h in hidden]
    if hide_secrets:
        home_path = Path(os.path.realpath(home if home is not None else home_dir()))
        targets += [Path(os.path.realpath(home_path / rel)) for rel in SECRET_HOME_PATHS]
        targets += [Path(os.path.realpath(p)) for p in SECRET_SYSTEM_PATHS]
        targets += [Path(os.path.realpath(s)) for s in host_sockets(env)]
    for target in targets:
        cover = _cover(target)
        if any(_inside(target, d) for d in (*writable, *readable)):
            covers_after += cover
        else:
            covers_before += cover

    args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    args += ["--size", str(tmp_size_bytes), "--tmpfs", "/tmp"]
    args += covers_before
    for d in readable:
        args += ["--ro-bind", str(d), str(d)]
    for d in writable:
        args += ["--bind", str(d), str(d)]
    args += covers_after
    # Empty covers are made read-only last (a workspace inside one needed its mount
    # point first): they would otherwise be writable, unbounded RAM.
    for target in targets:
        if target.is_dir():
            args += ["--remount-ro", str(target)]
    for path in protected:
        real = os.path.realpath(path)
        if os.path.exists(real):
            args += ["--ro-bind", real, real]
    args += ["--chdir", str(cwd)]
    args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    if not allow_network:
        args.append("--unshare-net")
    args += ["--die-with-parent", "--cap-drop", "ALL", "--", *argv]
    return args


@functools.cache
def _probe(bwrap: str, allow_network: bool) -> str | None:
    """None if bwrap runs a command with our full layout here, else why not."""
    with tempfile.TemporaryDirectory(prefix="continual-sandbox-probe-") as work:
        argv = bwrap_argv(
            ["/bin/sh", "-c", "echo ok > probe && cat probe"],
            workdir=work,
            writable_dirs=[work],
            allow_network=allow_network,
            bwrap=bwrap,
        )
        try:
            result = run_process(argv, cwd=work, timeout=15, output_cap=2000)
        except OSError as exc:
            return f"bwrap could not start: {exc}"
        if result.exit_code == 0 and result.output.strip() == "ok":
            return None
        detail = result.output.strip().splitlines()[-1:] or ["no output"]
        return f"bwrap failed (exit {result.exit_code}): {detail[0]}"


def bwrap_available(allow_network: bool = False) -> tuple[bool, str | None]:
    """(True, None) if the bwrap sandbox works on this machine, else (False, reason)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False, "bwrap (Debian/Ubuntu package `bubblewrap`) is not installed"
    reason = _probe(bwrap, allow_network)
    return reason is None, reason


def sandbox_status(settings: Settings) -> tuple[bool, str | None]:
    """Will bash run sandboxed? Returns (sandboxed, note for the reviewer or None).

    The note is meant to go into the proposal verbatim, so the reviewer is never left
    to assume a sandbox that is not there. When bash cannot run at all the note says
    so and how to allow it.
    """
    if settings.sandbox == "none":
        return False, (
            'bash will run WITHOUT a sandbox (sandbox = "none"): the command can read and '
            "change anything this user can"
        )
    ok, reason = bwrap_available(settings.allow_network)
    if ok:
        if settings.allow_network:
            return True, "bash runs in a sandbox WITH network access (allow_network = true)"
        return True, None
    if settings.allow_unsandboxed:
        return False, (
            f"bash will run WITHOUT a sandbox ({reason}): the command can read and change "
            "anything this user can"
        )
    return False, (
        f"bash cannot run: no sandbox available ({reason}); install bubblewrap, or set "
        "allow_unsandboxed = true to run commands without one"
    )


def _pids_cgroup_parent() -> Path | None:
    """This process's cgroup under the pids controller, if it may create children there."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            parent = Path("/sys/fs/cgroup/pids") / path.lstrip("/")
        elif controllers == "":
            parent = Path("/sys/fs/cgroup") / path.lstrip("/")
            with contextlib.suppress(OSError):
                if "pids" not in (parent / "cgroup.subtree_control").read_text().split():
                    continue
        else:
            continue
        if parent.is_dir() and os.access(parent, os.W_OK):
            return parent
    return None


def process_limit_note() -> str | None:
    """None if bash's process-count limit holds here, else why it does not.

    RLIMIT_NPROC counts per user; inside bwrap's user namespace it counts only the
    sandbox's processes, but it never binds uid 0, so a server running as root needs
    a pids cgroup it may create.
    """
    if os.geteuid() != 0:
        return None if bwrap_available()[0] else "no sandbox: RLIMIT_NPROC would count all"
    if _pids_cgroup_parent() is None:
        return "running as root without a writable pids cgroup"
    return None


@contextlib.contextmanager
def process_limit(limit: int) -> Iterator[list[str]]:
    """An argv prefix that starts a command in a fresh pids cgroup of `limit` tasks
    (for a server running as root), or [] where `ulimit -u` does the job or nothing can.
    The cgroup is removed afterwards."""
    parent = _pids_cgroup_parent() if os.geteuid() == 0 else None
    if parent is None:
        yield []
        return
    group = parent / f"continual-lsp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / "pids.max").write_text(str(limit))
    except OSError:
        with contextlib.suppress(OSError):
            group.rmdir()
        yield []
        return
    try:
        yield ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs")]
    finally:
        for _ in range(40):  # killed processes leave the group once reaped
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.05)


def limit_argv(
    argv: Sequence[str],
    *,
    cpu_seconds: float | None = None,
    memory_limit_bytes: int | None = None,
    file_size_bytes: int | None = None,
    processes: int | None = None,
) -> list[str]:
    """Wrap `argv` so it runs under rlimits (address space, CPU time, file size,
    process count: set that one only inside the sandbox, see `process_limit_note`).

    The limits are set by a tiny shell in the child rather than a preexec_fn: the
    server is multi-threaded, and preexec_fn is unsafe after threads have started.
    """
    limits = ["ulimit -c 0"]  # no core files in the workspace
    if memory_limit_bytes is not None:
        limits.append(f"ulimit -v {max(1, memory_limit_bytes // 1024)}")
    if cpu_seconds is not None:
        limits.append(f"ulimit -t {max(1, math.ceil(cpu_seconds))}")
    if file_size_bytes is not None:
        # POSIX sh (dash, bash as sh) counts `ulimit -f` in 512-byte blocks.
        limits.append(f"ulimit -f {max(1, file_size_bytes // 512)}")
    if processes is not None:
        # bash spells the process count -u; dash, -p.
        limits.append(f"{{ ulimit -u {processes} || ulimit -p {processes}; }} 2>/dev/null")
    script = " && ".join(limits) + ' && exec "$@"'
    return ["/bin/sh", "-c", script, "sh", *argv]


def run_sandboxed(
    argv: Sequence[str],
    workdir: str | os.PathLike[str],
    timeout: float,
    memory_limit_bytes: int | None,
    allow_network: bool,
    writable_dirs: Sequence[str | os.PathLike[str]],
    *,
    readable_dirs: Sequence[str | os.PathLike[str]] = (),
    stdin_data: bytes | None = None,
    env: Mapping[str, str] | None = None,
    home: str | os.PathLike[str] | None = None,
    output_cap: int = 30_000,
    merge_stderr: bool = False,
    allow_unsandboxed: bool = False,
    file_size_limit_bytes: int | None = 64 * 1024 * 1024,
) -> SandboxResult:
    """Run `argv` (not a shell string) sandboxed, with wall-clock, CPU and memory limits.

    Meant for untrusted programs such as generated guard code: pass a fresh temp dir
    as `workdir` and the only entry of `writable_dirs`. stdout and stderr come back
    separately unless `merge_stderr`. Without a working bwrap this raises ToolError,
    unless `allow_unsandboxed` (then `sandboxed` is False in the result; the rlimits
    and the timeout still apply).
    """
    base_env = dict(os.environ if env is None else env)
    limited = limit_argv(
        argv,
        cpu_seconds=timeout + 1,
        memory_limit_bytes=memory_limit_bytes,
        file_size_bytes=file_size_limit_bytes,
    )
    ok, reason = bwrap_available(allow_network)
    if ok:
        bwrap = shutil.which("bwrap") or "bwrap"
        full = bwrap_argv(
            limited,
            workdir=workdir,
            writable_dirs=writable_dirs,
            readable_dirs=readable_dirs,
            allow_network=allow_network,
            home=home if home is not None else home_dir(base_env),
            env=base_env,
            bwrap=bwrap,
        )
        run_env = sandbox_env(base_env, writable_dirs)
        sandboxed = True
    elif allow_unsandboxed:
        full, run_env, sandboxed = limited, base_env, False
    else:
        raise ToolError(f"cannot run sandboxed: {reason}")
    try:
        result = run_process(
            full,
            cwd=workdir,
            timeout=timeout,
            output_cap=output_cap,
            env=run_env,
            stdin_data=stdin_data,
            merge_stderr=merge_stderr,
        )
    except OSError as exc:
        raise ToolError(f"cannot start {argv[0] if argv else '(nothing)'}: {exc}") from exc
    return SandboxResult(**vars(result), sandboxed=sandboxed)
