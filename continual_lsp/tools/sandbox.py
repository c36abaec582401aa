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
6. git's metadata read-only (`git_protected_paths`; where git looks is in `gitlayout`).
   Hooks, config (``core.fsmonitor``, ``core.worktree``, aliases, included files) and a
   swapped-in ``.git`` all name programs that git later runs on the host, outside any
   sandbox. Bound read-only: every ``.git`` entry in a writable directory (a directory
   or gitfile; a symlinked one cannot be a mount point, so the folder holding it is
   *frozen* instead: read-only itself, its children read-write again, so the link
   cannot be removed or renamed), every bare-repository folder, and each one's git
   directories, hooks directories and included config files that lie inside. A bind
   mount cannot be renamed or removed, so ``mv .git .g && mkdir .git`` fails. The
   workspace root cannot become a repository: a missing ``.git``, and a missing
   ``HEAD`` unless ``.git`` holds a repository, get an empty placeholder directory for
   the length of the call (git ignores an empty ``.git``, and a HEAD that is a
   directory is no HEAD), and a root whose HEAD git accepts is refused outright
   (`protect_git`). A repository made anywhere deeper is removed when the call ends
   and the call fails saying so (``GitGuard.removed``).

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
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from continual_lsp.config import Settings
from continual_lsp.tools.base import ToolError
from continual_lsp.tools.gitlayout import (
    git_dirs,
    git_layouts,
    git_read_paths,
    is_git_dir,
    is_head_ref,
)
from continual_lsp.tools.process import ProcessResult, run_process

__all__ = [
    "HOST_SOCKETS",
    "SECRET_HOME_PATHS",
    "SECRET_SYSTEM_PATHS",
    "GitGuard",
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


def _secret_home_paths() -> tuple[str, ...]:
    """The home-directory deny list, kept as data (`continual_lsp/data/secret_home_paths.txt`)."""
    text = resources.files("continual_lsp.data").joinpath("secret_home_paths.txt").read_text()
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return tuple(dict.fromkeys(line for line in lines if line))


# Relative to the home directory. Directories get an empty tmpfs, files /dev/null.
SECRET_HOME_PATHS: tuple[str, ...] = _secret_home_paths()

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

# Environment variables whose names suggest a credential are not passed in (PWD and
# OLDPWD, the shell's directories, excepted), nor any whose value carries one: a URL
# with a user or password (DATABASE_URL=postgres://app:pw@db/prod, a Sentry DSN), a
# connection string with a key or password, a JWT, a chat webhook.
_SECRET_ENV = re.compile(
    r"(TOKEN|SECRET|PASS|PWD|JWT|WEBHOOK|DSN|CONN(ECTION)?_?STR(ING)?|API_?KEY|ACCESS_?KEY"
    r"|CREDENTIAL|PRIVATE|AUTH|SESSION_KEY|COOKIE|SIGNING|(^|_)(KEY|KEYS|SK|PAT|SALT)$)",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(
    r"^[a-z][a-z0-9+.-]*://[^/@\s]+@"
    r"|(AccountKey|SharedAccessKey|SharedAccessSignature|Password|Pwd)\s*="
    r"|\beyJ[\w-]{8,}\.eyJ[\w-]{8,}\."
    r"|hooks\.slack\.com/|discord(app)?\.com/api/webhooks/",
    re.IGNORECASE,
)
_SECRET_ENV_NAMES = frozenset({"SSH_AUTH_SOCK", "GPG_AGENT_INFO", "KRB5CCNAME", "NETRC"})
_KEPT_ENV_NAMES = frozenset({"PWD", "OLDPWD"})


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
        if name in _KEPT_ENV_NAMES
        or (
            name not in _SECRET_ENV_NAMES
            and not _SECRET_ENV.search(name)
            and not _SECRET_VALUE.search(value)
        )
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


@dataclass
class GitGuard:
    """What the sandbox of one call does about git (see `protect_git`).

    `protected`: bound read-only over the writable dirs, each with whether a missing
    one gets an empty file (an included config) rather than a directory as placeholder;
    `frozen`: folders whose own entries are fixed (the folder read-only, its children
    bound read-write again), because the symlinked ``.git`` in it cannot itself be a
    mount point; `known`: the identities of the layouts found before the call;
    `removed`: what the call left that git would take for a new repository, removed
    after it (root-relative).
    """

    protected: dict[Path, bool] = field(default_factory=dict)
    frozen: list[Path] = field(default_factory=list)
    known: set[tuple[int, int]] = field(default_factory=set)
    removed: list[str] = field(default_factory=list)


def git_protected_paths(root: str | os.PathLike[str]) -> GitGuard:
    """What to protect in a sandbox writing `root`: every git layout already in it (its
    ``.git`` entry or bare folder, and its git directories, hooks directories and
    included config files inside `root`) and the names that would make `root` itself
    one: ``.git``, and ``HEAD`` unless ``.git`` already holds a repository.

    ToolError if `root` holds a HEAD that git accepts: it is (or, after `mkdir objects
    refs`, becomes) a repository whose config the host's git would run.
    """
    top = Path(os.path.realpath(root))
    if is_head_ref(top / "HEAD"):
        raise ToolError(
            f"bash will not run in {top}: its HEAD file makes it a git directory (or one"
            " `mkdir objects refs` away from it), whose config the host's git would run"
        )
    guard = GitGuard(protected={top / ".git": False})
    layouts = git_layouts(top)
    guard.known = {g.identity for g in layouts}
    if not any(is_git_dir(d) for g in layouts if g.entry == top / ".git" for d in git_dirs(g)):
        guard.protected[top / "HEAD"] = False  # git would next take the root for a bare one
    for layout in layouts:
        if layout.entry.is_symlink():
            guard.frozen.append(layout.where)
        else:
            guard.protected.setdefault(layout.where if layout.bare else layout.entry, False)
        for path, is_file in git_read_paths(layout).items():
            if path != top and _inside(path, top):
                guard.protected.setdefault(path, is_file)
    return guard


def _placeholder(path: Path, is_file: bool) -> list[Path]:
    """Create `path` (and its missing parents) empty; returns what was made, deepest last.
    Nothing when this process cannot write there (then neither can the sandbox)."""
    missing = [*(p for p in reversed(path.parents) if not p.exists()), path]
    try:
        if is_file:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        else:
            path.mkdir(parents=True)
    except OSError:
        return []
    return missing


def _roll_back(root: Path, before: set[tuple[int, int]]) -> list[str]:
    """Remove every git layout under `root` that was not one before (a layout only moved
    keeps its identity); returns them root-relative."""
    removed = []
    for layout in git_layouts(root):
        if layout.identity in before:
            continue
        target = layout.entry
        with contextlib.suppress(OSError):
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink()
        rel = layout.where.relative_to(root) if layout.bare else target.relative_to(root)
        removed.append(rel.as_posix() or ".")
    return removed


@contextlib.contextmanager
def protect_git(writable_dirs: Sequence[str | os.PathLike[str]]) -> Iterator[GitGuard]:
    """The git protection of a sandbox writing `writable_dirs`, for the length of the block.

    A protected path that does not exist yet gets an empty placeholder, so the sandbox
    cannot create it; placeholders (and parents made for them) are removed afterwards if
    still empty. Then every git layout that was not there before the block is removed
    (`GitGuard.removed`): a repository made in a subfolder, where an editor's scan for
    repositories or a user's `cd` would run git, does not outlive the call.
    """
    guard = GitGuard()
    made: list[Path] = []
    before: dict[Path, set[tuple[int, int]]] = {}
    try:
        for d in writable_dirs:
            top = Path(os.path.realpath(d))
            found = git_protected_paths(top)
            before[top] = found.known
            guard.frozen += found.frozen
            for path, is_file in found.protected.items():
                if not path.exists() and not path.is_symlink():
                    made += _placeholder(path, is_file)
                if path.exists() and not path.is_symlink():
                    guard.protected[path] = is_file
        yield guard
    finally:
        for path in reversed(made):
            with contextlib.suppress(OSError):
                if path.is_dir():
                    path.rmdir()
                elif path.stat().st_size == 0:
                    path.unlink()
        for top, identities in before.items():
            guard.removed += _roll_back(top, identities)


def _frozen_binds(frozen: Sequence[str | os.PathLike[str]]) -> list[str]:
    args = []
    for folder in (Path(os.path.realpath(f)) for f in frozen):
        args += ["--ro-bind", str(folder), str(folder)]
        for child in sorted(folder.iterdir()):
            # A symlink cannot be a mount point, and a fifo or socket needs no writes.
            if not child.is_symlink() and (child.is_dir() or child.is_file()):
                args += ["--bind", str(child), str(child)]
    return args


def bwrap_argv(
    argv: Sequence[str],
    *,
    workdir: str | os.PathLike[str],
    writable_dirs: Sequence[str | os.PathLike[str]],
    allow_network: bool,
    home: str | os.PathLike[str] | None = None,
    readable_dirs: Sequence[str | os.PathLike[str]] = (),
    protected: Sequence[str | os.PathLike[str]] = (),
    frozen: Sequence[str | os.PathLike[str]] = (),
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
    `protect_git`). `frozen` folders inside the writable dirs keep their own entries:
    the folder is bound read-only, each of its files and folders read-write again, so
    nothing in it can be created, removed or renamed. `hidden` paths are covered like the home secrets, even without
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
    args += _frozen_binds(frozen)
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
