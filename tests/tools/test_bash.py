"""bash: process groups, timeouts, output caps; the bwrap sandbox and run_sandboxed."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from continual_lsp.config import Settings
from continual_lsp.tools import ToolCall, ToolError, ToolRunner, run_bash, run_sandboxed
from continual_lsp.tools import sandbox as sandbox_mod
from continual_lsp.tools.bash import TIMEOUT_EXIT_CODE
from continual_lsp.tools.sandbox import bwrap_argv, sandbox_status, scrub_env
from tests.tools.conftest import requires_bwrap, wait_gone

# Inside the sandbox: the interpreter itself, not a virtualenv's link to it, which the
# private /tmp hides when the clone lives under /tmp (standard library only there).
PYTHON = os.path.realpath(sys.executable)


def marker() -> str:
    """A unique `sleep` argument, so the test can find exactly its own processes."""
    return f"98{uuid.uuid4().int % 10**6:06d}.5"


# -- unsandboxed runner --------------------------------------------------------------


def test_exit_code_and_merged_output(tmp_path: Path, unsandboxed: Settings) -> None:
    result = run_bash("echo out; echo err >&2; exit 3", tmp_path, unsandboxed)
    assert not result.ok and result.exit_code == 3
    assert result.output == "out\nerr\n"
    ok = run_bash("pwd", tmp_path, unsandboxed)
    assert ok.ok and ok.exit_code == 0 and ok.output.strip() == str(tmp_path.resolve())
    assert run_bash("true", tmp_path, unsandboxed).output == "(no output)"


def test_stdin_is_dev_null(tmp_path: Path, unsandboxed: Settings) -> None:
    result = run_bash("cat; echo done", tmp_path, unsandboxed, timeout=5)
    assert result.ok and result.output == "done\n"  # `cat` saw EOF instead of hanging


def test_invalid_utf8_is_replaced(tmp_path: Path, unsandboxed: Settings) -> None:
    result = run_bash(r"printf 'caf\351\n'", tmp_path, unsandboxed)
    assert result.output == "caf\ufffd\n"


def test_timeout_kills_the_whole_group(tmp_path: Path, unsandboxed: Settings) -> None:
    tag = marker()
    cmd = f"sleep {tag} & echo $!; (sleep {tag} & echo $!; wait) & sleep {tag}"
    started = time.monotonic()
    result = run_bash(cmd, tmp_path, unsandboxed, timeout=1)
    assert time.monotonic() - started < 5
    assert not result.ok and result.exit_code == TIMEOUT_EXIT_CODE
    assert "timed out after 1 s" in result.output
    children = [int(line) for line in result.output.splitlines() if line.strip().isdigit()]
    assert len(children) == 2
    # by marker, not by pid: a freed pid can be a new process's (or thread's) by now
    assert wait_gone(tag) == []


def test_background_children_do_not_outlive_the_command(
    tmp_path: Path, unsandboxed: Settings
) -> None:
    tag = marker()
    started = time.monotonic()
    result = run_bash(f"sleep {tag} & echo started", tmp_path, unsandboxed, timeout=20)
    assert result.ok and result.output == "started\n"
    assert time.monotonic() - started < 5  # did not wait for the sleeper's pipe
    assert wait_gone(tag) == []


@pytest.mark.parametrize(
    "sandbox", ["none", pytest.param("bwrap", marks=requires_bwrap)], ids=["plain", "bwrap"]
)
def test_file_size_limit_stops_a_runaway_write(tmp_path: Path, sandbox: str) -> None:
    settings = Settings(sandbox=sandbox, bash_file_size_limit_mb=1)
    result = run_bash("head -c 3000000 /dev/zero > big.bin", tmp_path, settings)
    assert not result.ok
    assert "size limit (1 MB" in result.output
    assert (tmp_path / "big.bin").stat().st_size <= 1 << 20
    # below the limit nothing changes
    assert run_bash("head -c 1000 /dev/zero > small.bin", tmp_path, settings).ok


@pytest.mark.parametrize(
    "sandbox", ["none", pytest.param("bwrap", marks=requires_bwrap)], ids=["plain", "bwrap"]
)
def test_file_size_limit_is_the_setting_not_half_of_it(tmp_path: Path, sandbox: str) -> None:
    """Issue 15: `ulimit -f` under dash counts 512-byte blocks, so 1 MB allowed 512 KiB."""
    settings = Settings(sandbox=sandbox, bash_file_size_limit_mb=1)
    assert run_bash("head -c 900000 /dev/zero > f.bin", tmp_path, settings).ok
    assert (tmp_path / "f.bin").stat().st_size == 900000


@requires_bwrap
def test_private_tmp_is_bounded(tmp_path: Path, secret_home: Path) -> None:
    """Issue 15: the private /tmp is RAM; without a size many files could fill it."""
    settings = Settings(bash_tmp_size_mb=8, bash_timeout=10)
    result = run_bash(
        "for i in 1 2 3; do head -c 4000000 /dev/zero > /tmp/f$i || exit 3; done",
        tmp_path,
        settings,
    )
    assert result.exit_code == 3 and "No space left on device" in result.output
    env = dict(os.environ, HOME=str(secret_home))
    covered = run_bash("echo x > $HOME/.ssh/planted", tmp_path, settings, env=env)
    assert "Read-only file system" in covered.output  # a covered secret is no RAM either


@requires_bwrap
def test_fork_bomb_meets_the_process_limit(tmp_path: Path) -> None:
    """Issue 15: no process-count limit; a fork bomb lived until the timeout."""
    if sandbox_mod.process_limit_note() is not None:
        pytest.skip(sandbox_mod.process_limit_note())
    code = (
        "import os, time\n"
        "n = 0\n"
        "for i in range(80):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(2)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "print('forked', n)\n"
    )
    script = tmp_path / "bomb.py"
    script.write_text(code)
    settings = Settings(bash_max_processes=32, bash_timeout=20)
    result = run_bash(f"{PYTHON} bomb.py", tmp_path, settings)
    forked = int(result.output.split("forked", 1)[1].split()[0])
    assert forked < 32, result.output
    assert run_bash("echo fine", tmp_path, settings).output == "fine\n"  # the next call runs


def test_memory_limit_is_opt_in(tmp_path: Path) -> None:
    grab = f"{sys.executable} -c \"b = bytearray(300 * 2**20); print('allocated')\""
    assert run_bash(grab, tmp_path, Settings(sandbox="none")).output.strip() == "allocated"
    capped = run_bash(grab, tmp_path, Settings(sandbox="none", bash_memory_limit_mb=200))
    assert not capped.ok and "MemoryError" in capped.output


def test_cpu_limit_ends_a_process_that_left_the_group(tmp_path: Path) -> None:
    """An escaped busy loop (setsid) outlives the timeout's kill but not its CPU limit."""
    tag = marker()
    busy = f"setsid sh -c 'x={tag}; while :; do :; done' & wait"
    run_bash(busy, tmp_path, Settings(sandbox="none"), timeout=1)
    # CPU limit = 1 s × cores; the loop gets at most one core
    assert wait_gone(tag, seconds=10 + 2 * (os.cpu_count() or 1)) == []


def test_huge_output_is_capped(tmp_path: Path) -> None:
    settings = Settings(sandbox="none", output_cap=3000)
    started = time.monotonic()
    result = run_bash(
        "head -c 50000000 /dev/zero | tr '\\0' a; echo; echo THE-END", tmp_path, settings
    )
    assert time.monotonic() - started < 20
    assert result.ok and result.truncated
    assert len(result.output) < 3200
    assert "output truncated" in result.output and "bytes cut" in result.output
    assert result.output.rstrip().endswith("THE-END")  # the tail is kept


def test_parent_stdout_is_never_inherited(tmp_path: Path, unsandboxed: Settings) -> None:
    """Writing to fd 1 goes into the result, not into the server's protocol stream."""
    result = run_bash("echo to-fd1 >&1; echo to-fd2 >&2", tmp_path, unsandboxed)
    assert result.output == "to-fd1\nto-fd2\n"


def test_workspace_runs_bash(tmp_path: Path) -> None:
    ws = ToolRunner(tmp_path, Settings(sandbox="none"))
    result = ws.execute(ToolCall(tool="bash", arguments={"cmd": "echo hi > f.txt; cat f.txt"}))
    assert result.output == "hi\n" and (tmp_path / "f.txt").exists()


# -- sandbox status and refusal ------------------------------------------------------


def test_status_notes() -> None:
    sandboxed, note = sandbox_status(Settings(sandbox="none"))
    assert not sandboxed and note and "WITHOUT a sandbox" in note


def test_no_bwrap_refuses_unless_allowed(tmp_path: Path) -> None:
    with mock.patch.object(sandbox_mod.shutil, "which", return_value=None):
        sandboxed, note = sandbox_status(Settings())
        assert not sandboxed and note and "cannot run" in note and "bubblewrap" in note
        with pytest.raises(ToolError, match="allow_unsandboxed"):
            run_bash("echo hi", tmp_path, Settings())
        with pytest.raises(ToolError, match="cannot run sandboxed"):
            run_sandboxed(["true"], tmp_path, 5, None, False, [tmp_path])

        allowed = Settings(allow_unsandboxed=True)
        sandboxed, note = sandbox_status(allowed)
        assert not sandboxed and note and "WITHOUT a sandbox" in note
        assert run_bash("echo hi", tmp_path, allowed).output == "hi\n"
        result = run_sandboxed(
            ["echo", "x"], tmp_path, 5, None, False, [tmp_path], allow_unsandboxed=True
        )
        assert not result.sandboxed and result.output == "x\n"


def test_scrub_env_drops_credentials() -> None:
    env = {
        "PATH": "/bin",
        "GITHUB_TOKEN": "t",
        "OPENAI_API_KEY": "k",
        "SSH_AUTH_SOCK": "/s",
        "LANG": "C",
    }
    assert scrub_env(env) == {"PATH": "/bin", "LANG": "C"}


def test_bwrap_argv_order_keeps_workspace_visible(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".config" / "proj").mkdir(parents=True)
    (home / ".ssh").mkdir()
    work = home / ".config" / "proj"
    argv = bwrap_argv(["true"], workdir=work, writable_dirs=[work], allow_network=False, home=home)
    joined = " ".join(argv)
    assert argv.index("--tmpfs") < argv.index("--bind")
    assert joined.index(f"--tmpfs {home}/.config") < joined.index(f"--bind {work} {work}")
    assert "--unshare-net" in argv and "--cap-drop" in argv and "--die-with-parent" in argv
    net = bwrap_argv(["true"], workdir=work, writable_dirs=[work], allow_network=True, home=home)
    assert "--unshare-net" not in net


# -- the real sandbox ----------------------------------------------------------------


@pytest.fixture
def sandboxed() -> Settings:
    return Settings(bash_timeout=10)


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 outside the sandbox; yields its port."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.sendall(b"hello\n")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=2)
        srv.close()


def _connect_cmd(port: int) -> str:
    code = (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
        "print('CONNECTED', s.recv(16).decode().strip())\n"
    )
    return f'{PYTHON} -c "{code}"'


@requires_bwrap
def test_sandbox_status_ok(sandboxed: Settings) -> None:
    assert sandbox_status(sandboxed) == (True, None)
    ok, note = sandbox_status(Settings(allow_network=True))
    assert ok and note and "WITH network" in note


@requires_bwrap
def test_sandbox_writes_only_inside_workspace(tmp_path: Path, sandboxed: Settings) -> None:
    work = tmp_path / "ws"  # under /tmp on purpose: the private /tmp must not hide it
    work.mkdir()
    outside = Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else tmp_path
    target = outside / f"escape-{uuid.uuid4().hex}"
    result = run_bash(
        f"echo ok > inside.txt && cat inside.txt; echo bad > {target}; echo bad > {tmp_path}/sib.txt",
        work,
        sandboxed,
    )
    assert "ok" in result.output
    assert (work / "inside.txt").read_text() == "ok\n"
    assert not target.exists()
    assert not (tmp_path / "sib.txt").exists()  # /tmp outside the workspace is private
    assert "Read-only file system" in result.output


@requires_bwrap
def test_sandbox_hides_home_secrets(tmp_path: Path, sandboxed: Settings, secret_home: Path) -> None:
    env = dict(os.environ, HOME=str(secret_home), MY_SECRET_TOKEN="tok-123")
    result = run_bash(
        "cat $HOME/.ssh/id_test; cat $HOME/.netrc; ls -a $HOME/.ssh; env",
        tmp_path,
        sandboxed,
        env=env,
    )
    assert "PRIVATE-KEY" not in result.output
    assert "NETRC-PW" not in result.output
    assert "tok-123" not in result.output
    # The same command without the sandbox does see them: the test plants them right.
    plain = run_bash("cat $HOME/.ssh/id_test", tmp_path, Settings(sandbox="none"), env=env)
    assert "PRIVATE-KEY" in plain.output


def test_scrub_env_drops_keys_and_urls_with_passwords() -> None:
    """Issue 15: OPENAI_KEY, STRIPE_SK and a DATABASE_URL with a password got through."""
    env = {
        "OPENAI_KEY": "sk-1",
        "STRIPE_SK": "sk_live_2",
        "DATABASE_URL": "postgres://app:hunter2@db:5432/prod",
        "REDIS_DSN": "redis://:pw@cache:6379",
        "HOMEPAGE_URL": "https://example.com/a:b",
        "KEYBOARD": "us",
        "PATH": "/usr/bin",
    }
    assert scrub_env(env) == {
        "HOMEPAGE_URL": "https://example.com/a:b",
        "KEYBOARD": "us",
        "PATH": "/usr/bin",
    }


@requires_bwrap
def test_sandbox_hides_more_credentials(
    tmp_path: Path, sandboxed: Settings, secret_home: Path
) -> None:
    planted = {
        ".cache/huggingface/token": "HF-TOKEN-1",
        ".claude/.credentials.json": "CLAUDE-CRED-2",
        ".m2/settings.xml": "MAVEN-PW-3",
    }
    for rel, text in planted.items():
        (secret_home / rel).parent.mkdir(parents=True, exist_ok=True)
        (secret_home / rel).write_text(text + "\n")
    cmd = "; ".join(f"cat $HOME/{rel}" for rel in planted) + "; cat /etc/shadow"
    result = run_bash(cmd, tmp_path, sandboxed, env=dict(os.environ, HOME=str(secret_home)))
    for text in planted.values():
        assert text not in result.output
    assert "root:" not in result.output  # readable to a server running as root


@requires_bwrap
def test_sandbox_covers_unlisted_daemon_sockets(tmp_path: Path, sandboxed: Settings) -> None:
    """A socket named by DOCKER_HOST, and any socket under /run, is not reachable."""
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    where = Path(tempfile.mkdtemp(prefix="continual-sock-", dir=base))
    paths = [where / "docker.sock"]
    if os.access("/run", os.W_OK):
        paths.append(Path(f"/run/continual-test-{uuid.uuid4().hex[:8]}.sock"))
    servers = []
    try:
        for path in paths:
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            srv.bind(str(path))
            srv.listen(1)
            servers.append(srv)
        env = dict(os.environ, DOCKER_HOST=f"unix://{paths[0]}")
        for path in paths:
            code = (
                "import socket; c = socket.socket(socket.AF_UNIX); "
                f"c.connect('{path}'); print('CONNECTED')"
            )
            result = run_bash(f'{PYTHON} -c "{code}"', tmp_path, sandboxed, env=env)
            assert "CONNECTED" not in result.output, path
    finally:
        for srv in servers:
            srv.close()
        for path in paths:
            path.unlink(missing_ok=True)
        shutil.rmtree(where, ignore_errors=True)


@requires_bwrap
def test_workspace_inside_hidden_dir_stays_writable(sandboxed: Settings, secret_home: Path) -> None:
    work = secret_home / ".config" / "proj"
    work.mkdir(parents=True)
    (secret_home / ".config" / "gh-token").write_text("GH-SECRET\n")
    result = run_bash(
        "echo w > made.txt && cat made.txt; cat ../gh-token", work, sandboxed, home=secret_home
    )
    assert (work / "made.txt").read_text() == "w\n"
    assert "GH-SECRET" not in result.output


@requires_bwrap
def test_sandbox_blocks_network(tmp_path: Path, sandboxed: Settings, listener: int) -> None:
    blocked = run_bash(_connect_cmd(listener), tmp_path, sandboxed)
    assert not blocked.ok and "CONNECTED" not in blocked.output
    allowed = run_bash(_connect_cmd(listener), tmp_path, Settings(allow_network=True))
    assert allowed.ok and "CONNECTED hello" in allowed.output, allowed.output


@requires_bwrap
def test_sandbox_timeout_kills_everything(tmp_path: Path, sandboxed: Settings) -> None:
    tag = marker()
    cmd = f"sleep {tag} & (sleep {tag} &); setsid sleep {tag} & sleep {tag}"
    started = time.monotonic()
    result = run_bash(cmd, tmp_path, sandboxed, timeout=1)
    assert time.monotonic() - started < 5
    assert result.exit_code == TIMEOUT_EXIT_CODE and "timed out" in result.output
    assert wait_gone(tag) == []  # even the setsid one: the pid namespace is gone


@requires_bwrap
def test_sandbox_root_cannot_remount(tmp_path: Path, sandboxed: Settings) -> None:
    result = run_bash("mount -o remount,rw / 2>&1; touch /etc/continual-probe", tmp_path, sandboxed)
    assert not Path("/etc/continual-probe").exists()
    assert not result.ok


@requires_bwrap
def test_git_metadata_is_read_only(tmp_path: Path, sandboxed: Settings) -> None:
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / ".git" / "config").write_text("[core]\n")
    result = run_bash(
        "echo evil > .git/hooks/pre-commit; echo x >> .git/config; echo no > .git/other",
        tmp_path,
        sandboxed,
    )
    assert not (tmp_path / ".git" / "hooks" / "pre-commit").exists()
    assert (tmp_path / ".git" / "config").read_text() == "[core]\n"
    assert not (tmp_path / ".git" / "other").exists()
    assert result.output.count("Read-only file system") == 3


@requires_bwrap
def test_git_dir_cannot_be_replaced(tmp_path: Path, sandboxed: Settings) -> None:
    """The attack from issue 15: swap .git for a copy, then plant a hook and fsmonitor."""
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / ".git" / "config").write_text("[core]\n")
    (tmp_path / "src.py").write_text("x = 1\n")
    run_bash(
        "mv .git .g; mkdir .git; cp -a .g/. .git/; echo evil > .git/hooks/pre-commit;"
        " printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' > .git/config;"
        " echo y > src.py",
        tmp_path,
        sandboxed,
    )
    assert not (tmp_path / ".g").exists()
    assert not (tmp_path / ".git" / "hooks" / "pre-commit").exists()
    assert (tmp_path / ".git" / "config").read_text() == "[core]\n"
    assert (tmp_path / "src.py").read_text() == "y\n"  # the work tree stays writable


@requires_bwrap
def test_no_git_dir_can_be_created(tmp_path: Path, sandboxed: Settings) -> None:
    result = run_bash(
        "mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit", tmp_path, sandboxed
    )
    assert not result.ok
    assert not (tmp_path / ".git").exists()  # the placeholder is gone afterwards
    gitfile = run_bash("rmdir .git; echo 'gitdir: /tmp/evil' > .git", tmp_path, sandboxed)
    assert not gitfile.ok and not (tmp_path / ".git").exists()


@requires_bwrap
def test_hooks_path_inside_the_work_tree_is_read_only(tmp_path: Path, sandboxed: Settings) -> None:
    """husky: core.hooksPath names a work-tree directory that the host's git runs."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n\thooksPath = .husky/_\n")
    (tmp_path / ".githooks").mkdir()
    result = run_bash(
        "mkdir -p .husky/_ && echo evil > .husky/_/pre-commit; echo evil > .husky/pre-commit;"
        " echo ok > .githooks/x",
        tmp_path,
        sandboxed,
    )
    assert result.output.count("Read-only file system") == 2
    assert not (tmp_path / ".husky").exists()
    assert (tmp_path / ".githooks" / "x").read_text() == "ok\n"  # not configured: writable


@requires_bwrap
def test_run_sandboxed_limits(tmp_path: Path) -> None:
    guard = tmp_path / "guard"
    guard.mkdir()
    echo = run_sandboxed(
        [
            PYTHON,
            "-c",
            "import sys; print(sys.stdin.read().upper()); print('w', file=sys.stderr)",
        ],
        guard,
        10,
        512 * 1024 * 1024,
        False,
        [guard],
        stdin_data=b"proposal",
    )
    assert echo.sandboxed and echo.exit_code == 0
    assert echo.output == "PROPOSAL\n" and echo.stderr == "w\n"

    memory = run_sandboxed(
        [PYTHON, "-c", "x = bytearray(800 * 1024 * 1024)"],
        guard,
        10,
        256 * 1024 * 1024,
        False,
        [guard],
    )
    assert memory.exit_code != 0 and "MemoryError" in memory.stderr

    started = time.monotonic()
    spin = run_sandboxed([PYTHON, "-c", "while True: pass"], guard, 1, None, False, [guard])
    assert spin.timed_out and time.monotonic() - started < 5

    write = run_sandboxed(
        [PYTHON, "-c", f"open('ok', 'w').write('x'); open('{tmp_path}/escape', 'w')"],
        guard,
        10,
        None,
        False,
        [guard],
    )
    # The write outside `guard` lands in the sandbox's private /tmp, never on the host.
    assert write.exit_code == 0
    assert (guard / "ok").exists() and not (tmp_path / "escape").exists()
    etc = run_sandboxed(
        ["/bin/sh", "-c", "echo x > /etc/guard-probe"], guard, 10, None, False, [guard]
    )
    assert etc.exit_code != 0 and "Read-only" in etc.stderr


def test_sandbox_env_points_tmpdir_somewhere_writable(tmp_path: Path) -> None:
    from continual_lsp.tools.sandbox import sandbox_env

    assert sandbox_env({"TMPDIR": "/var/tmp/x"}, [tmp_path])["TMPDIR"] == "/tmp"
    inside = str(tmp_path / "t")
    assert sandbox_env({"TMPDIR": inside}, [tmp_path])["TMPDIR"] == inside


def test_command_that_closes_its_output_still_gets_its_time(
    tmp_path: Path, unsandboxed: Settings
) -> None:
    result = run_bash("exec >&- 2>&-; sleep 0.3; touch done.txt", tmp_path, unsandboxed, timeout=5)
    assert result.ok and (tmp_path / "done.txt").exists()
    slow = run_bash("exec >&- 2>&-; sleep 30", tmp_path, unsandboxed, timeout=1)
    assert slow.exit_code == TIMEOUT_EXIT_CODE


@requires_bwrap
def test_sandbox_covers_a_socket_secret(
    tmp_path: Path, sandboxed: Settings, secret_home: Path
) -> None:
    """A unix socket is reachable through a read-only bind; a covered one is not."""
    path = secret_home / ".docker"
    path.mkdir()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path / "run.sock"))
    srv.listen(1)
    try:
        code = (
            "import socket; c = socket.socket(socket.AF_UNIX); "
            f"c.connect('{path}/run.sock'); print('CONNECTED')"
        )
        result = run_bash(f'{PYTHON} -c "{code}"', tmp_path, sandboxed, home=secret_home)
        assert "CONNECTED" not in result.output and not result.ok
    finally:
        srv.close()
