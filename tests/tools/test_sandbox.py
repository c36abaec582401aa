"""The sandbox as the host sees it afterwards: git layouts that the host's git would run
(issue 32, findings 3 and 4) and secrets hidden from commands (finding 7).

Each git test runs the attack as an approved bash call in the real bwrap sandbox, then
runs git on the host in the workspace, as an editor or the user would, and checks that
the fsmonitor / hook command it planted never ran.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from continual_lsp.config import Settings
from continual_lsp.tools import ToolCall, ToolError, ToolRunner, run_bash
from tests.tools.conftest import requires_bwrap

GIT = shutil.which("git")
requires_git = pytest.mark.skipif(GIT is None, reason="git is not installed")


@pytest.fixture
def sandboxed() -> Settings:
    return Settings(bash_timeout=20)


def host_git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """git as the host runs it: no sandbox, the user's ordinary discovery rules."""
    assert GIT is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(
        [GIT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=30, check=False
    )


def plant(marker: Path) -> str:
    """Shell that points core.fsmonitor and a pre-commit hook of the repository git finds
    from the current directory at a command that creates `marker`."""
    hook = f"#!/bin/sh\\ntouch {marker}\\n"
    return (
        f"git config core.fsmonitor 'touch {marker}; true'; "
        f'mkdir -p "$(git rev-parse --git-path hooks)"; '
        f"printf '{hook}' > \"$(git rev-parse --git-path hooks)/pre-commit\"; "
        f'chmod +x "$(git rev-parse --git-path hooks)/pre-commit"'
    )


def bare_attack(workspace: Path, marker: Path) -> str:
    """Issue 32 finding 3: make the workspace itself a bare repository, then a work tree."""
    return (
        "git init -q --bare . ; git config core.bare false; "
        f"git config core.worktree {workspace}; " + plant(marker)
    )


def assert_host_git_runs_nothing(workspace: Path, marker: Path) -> None:
    for args in (("status",), ("commit", "-q", "--allow-empty", "-m", "x")):
        host_git(workspace, *args)
        assert not marker.exists(), f"host `git {args[0]}` ran a planted command"


@requires_bwrap
@requires_git
def test_workspace_without_git_cannot_become_a_bare_repository(
    tmp_path: Path, sandboxed: Settings
) -> None:
    work = tmp_path / "ws"
    work.mkdir()
    (work / "main.py").write_text("x = 1\n")
    marker = tmp_path / "PWNED"
    run_bash(bare_attack(work, marker), work, sandboxed)
    assert_host_git_runs_nothing(work, marker)
    assert not (work / "HEAD").exists()  # the placeholder is gone afterwards


@requires_bwrap
@requires_git
def test_subfolder_of_a_repository_cannot_become_a_bare_repository(
    tmp_path: Path, sandboxed: Settings
) -> None:
    """The monorepo case: the workspace is a package folder of a larger repository."""
    repo = tmp_path / "mono"
    work = repo / "pkg"
    work.mkdir(parents=True)
    host_git(repo, "init", "-q")
    (work / "main.py").write_text("x = 1\n")
    marker = tmp_path / "PWNED"
    run_bash(bare_attack(work, marker), work, sandboxed)
    assert_host_git_runs_nothing(work, marker)
    assert not (work / "HEAD").exists()  # git init's other files are harmless without it


@requires_bwrap
@requires_git
def test_new_nested_repository_is_rolled_back(tmp_path: Path, sandboxed: Settings) -> None:
    """A repository made in a subfolder (where an editor's repository scan, or a user's
    `cd`, would run git) is removed when the call ends, and the call fails saying so."""
    work = tmp_path / "ws"
    work.mkdir()
    marker = tmp_path / "PWNED"
    result = run_bash(
        "mkdir -p sub bare && (cd sub && git init -q . && "
        + plant(marker)
        + ") && (cd bare && git init -q --bare . && "
        + plant(marker)
        + ")",
        work,
        sandboxed,
    )
    assert not result.ok
    assert "sub/.git" in result.output and "bare" in result.output
    assert not (work / "sub" / ".git").exists()
    assert not (work / "bare" / "HEAD").exists()
    assert_host_git_runs_nothing(work / "sub", marker)
    assert_host_git_runs_nothing(work / "bare", marker)


@requires_bwrap
@requires_git
def test_existing_nested_repository_is_read_only(tmp_path: Path, sandboxed: Settings) -> None:
    work = tmp_path / "ws"
    (work / "vendor" / "lib").mkdir(parents=True)
    host_git(work / "vendor" / "lib", "init", "-q")
    marker = tmp_path / "PWNED"
    result = run_bash("cd vendor/lib && " + plant(marker), work, sandboxed)
    assert "Read-only file system" in result.output
    assert_host_git_runs_nothing(work / "vendor" / "lib", marker)
    # Moving the folder that holds it is not a new repository: nothing is removed.
    moved = run_bash("mv vendor vendored", work, sandboxed)
    assert moved.ok, moved.output
    assert (work / "vendored" / "lib" / ".git" / "HEAD").is_file()


@requires_bwrap
@requires_git
@pytest.mark.parametrize("where", ["inside", "outside"])
def test_symlinked_git_dir_cannot_be_replaced(
    tmp_path: Path, sandboxed: Settings, where: str
) -> None:
    """Issue 32 finding 4: `.git` is a symlink; bash replaced it, then planted a hook and
    an fsmonitor that the host's git status and commit ran."""
    work = tmp_path / "ws"
    work.mkdir()
    real = (work / ".realgit") if where == "inside" else (tmp_path / "real.git")
    host_git(tmp_path, "init", "-q", "--separate-git-dir", str(real), str(work))
    (work / ".git").unlink()
    (work / ".git").symlink_to(real)
    (work / "main.py").write_text("x = 1\n")
    marker = tmp_path / "PWNED"
    result = run_bash(
        "rm -rf .git; git init -q . ; "
        + plant(marker)
        + "; mv .git .g; mkdir .git; echo y > main.py; echo n > new.py",
        work,
        sandboxed,
    )
    assert (work / ".git").is_symlink() and (work / ".git").resolve() == real
    assert_host_git_runs_nothing(work, marker)
    # The link's target is read-only too.
    run_bash("cd .git && " + plant(marker), work, sandboxed)
    assert_host_git_runs_nothing(work, marker)
    # Files and folders in the root stay writable; the root's own entries do not.
    assert (work / "main.py").read_text() == "y\n"
    assert not (work / "new.py").exists()
    assert "Read-only file system" in result.output


@requires_bwrap
@requires_git
def test_gitfile_target_inside_the_workspace_is_read_only(
    tmp_path: Path, sandboxed: Settings
) -> None:
    work = tmp_path / "ws"
    work.mkdir()
    host_git(tmp_path, "init", "-q", "--separate-git-dir", str(work / ".store"), str(work))
    assert (work / ".git").is_file()
    marker = tmp_path / "PWNED"
    run_bash("cd .store && " + plant(marker), work, sandboxed)
    assert_host_git_runs_nothing(work, marker)


@requires_bwrap
@requires_git
def test_included_config_inside_the_work_tree_is_read_only(
    tmp_path: Path, sandboxed: Settings
) -> None:
    """`[include] path = ../.gitconfig.project`: git reads that work-tree file as config."""
    work = tmp_path / "ws"
    work.mkdir()
    host_git(work, "init", "-q")
    host_git(work, "config", "include.path", "../.gitconfig.project")
    marker = tmp_path / "PWNED"
    run_bash(
        f"printf '[core]\\n\\tfsmonitor = touch {marker}; true\\n' > .gitconfig.project",
        work,
        sandboxed,
    )
    assert_host_git_runs_nothing(work, marker)
    assert not (work / ".gitconfig.project").exists()


@requires_bwrap
@requires_git
def test_bash_refuses_a_workspace_that_is_a_git_directory(
    tmp_path: Path, sandboxed: Settings
) -> None:
    work = tmp_path / "repo.git"
    work.mkdir()
    host_git(work, "init", "-q", "--bare", ".")
    with pytest.raises(ToolError, match="git directory"):
        run_bash("true", work, sandboxed)


@pytest.mark.parametrize(
    "path",
    [".git/config", ".git/hooks/pre-commit", "sub/.git/config", ".GIT/config", "HEAD", "x/HEAD"],
)
def test_write_refuses_git_metadata(tmp_path: Path, path: str) -> None:
    runner = ToolRunner(tmp_path, Settings(sandbox="none"))
    call = ToolCall(tool="write", arguments={"path": path, "content": "ref: refs/heads/x\n"})
    with pytest.raises(ToolError, match="git"):
        runner.preview(call)
    assert not (tmp_path / path).exists()


@requires_git
def test_edit_refuses_a_file_inside_a_bare_repository(tmp_path: Path) -> None:
    bare = tmp_path / "fixtures" / "repo"
    bare.mkdir(parents=True)
    host_git(bare, "init", "-q", "--bare", ".")
    runner = ToolRunner(tmp_path, Settings(sandbox="none"))
    call = ToolCall(
        tool="edit",
        arguments={"path": "fixtures/repo/config", "old": "[core]", "new": "[core]\n\tx = 1"},
    )
    with pytest.raises(ToolError, match="git"):
        runner.preview(call)


# -- secrets (finding 7) -----------------------------------------------------------------

SECRET_ENV = {
    "MYSQL_PWD": "env-mysql-1",
    "PGPASS": "env-pgpass-2",
    "GPG_PASSPHRASE": "env-gpg-3",
    "KEYSTORE_PASS": "env-keystore-4",
    "CI_JOB_JWT": "env-jwt-5",
    "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountKey=env-az-6",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/env-slack-7",
    "SENTRY_DSN": "https://env-sentry-8@o1.ingest.sentry.io/1",
    "DB_URL": "mysql://env-user-9@db/prod",
    "BUILD_INFO": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.env-jwt-value-10",
}

SECRET_FILES = [
    ".kaggle/kaggle.json",
    ".pip/pip.conf",
    ".dbt/profiles.yml",
    ".yarnrc.yml",
    ".databrickscfg",
    ".psql_history",
    ".mysql_history",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".docker/config.json",
    ".kube/config",
    ".aws/credentials",
    ".azure/accessTokens.json",
    ".config/gcloud/credentials.db",
    ".config/gh/hosts.yml",
    ".config/hub",
    ".ssh/id_ed25519",
    ".gnupg/private-keys-v1.d/k.key",
    ".git-credentials",
    ".terraform.d/credentials.tfrc.json",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".node_repl_history",
    ".sqlite_history",
    ".rediscli_history",
    ".vault-token",
    ".boto",
    ".s3cfg",
]


@requires_bwrap
def test_secret_env_and_home_files_are_invisible(
    tmp_path: Path, sandboxed: Settings, secret_home: Path
) -> None:
    for i, rel in enumerate(SECRET_FILES):
        (secret_home / rel).parent.mkdir(parents=True, exist_ok=True)
        (secret_home / rel).write_text(f"file-secret-{i}-x\n")
    env = dict(os.environ, HOME=str(secret_home), **SECRET_ENV, GREETING="visible-hello")
    cmd = "env; echo PWD=$PWD; " + "; ".join(f"cat $HOME/{rel}" for rel in SECRET_FILES)
    result = run_bash(cmd, tmp_path, sandboxed, env=env)
    assert "visible-hello" in result.output  # the command ran and printed its environment
    assert f"PWD={tmp_path}" in result.output  # the shell's own PWD still works
    leaked = [name for name, value in SECRET_ENV.items() if value in result.output]
    assert leaked == []
    shown = [rel for i, rel in enumerate(SECRET_FILES) if f"file-secret-{i}-x" in result.output]
    assert shown == []
    # Without the sandbox the same command sees them: the test plants them right.
    plain = run_bash(cmd, tmp_path, Settings(sandbox="none"), env=env)
    assert all(f"file-secret-{i}-x" in plain.output for i in range(len(SECRET_FILES)))
    assert all(value in plain.output for value in SECRET_ENV.values())
