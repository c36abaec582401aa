"""Where git finds a repository, checked against git itself where it matters."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from continual_lsp.tools.gitlayout import (
    git_layouts,
    git_read_paths,
    is_git_dir,
    is_git_path,
    is_head_ref,
)

GIT = shutil.which("git")
requires_git = pytest.mark.skipif(GIT is None, reason="git is not installed")


def git(cwd: Path, *args: str) -> str:
    assert GIT is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    out = subprocess.run([GIT, *args], cwd=cwd, env=env, capture_output=True, text=True)
    return out.stdout.strip()


@pytest.mark.parametrize(
    ("content", "valid"),
    [
        ("ref: refs/heads/main\n", True),
        ("0123456789abcdef0123456789abcdef01234567\n", True),
        ("ref: main\n", False),
        ("hello\n", False),
        ("", False),
    ],
)
def test_head_ref_follows_git(tmp_path: Path, content: str, valid: bool) -> None:
    (tmp_path / "HEAD").write_text(content)
    assert is_head_ref(tmp_path / "HEAD") is valid


def test_a_directory_or_a_missing_head_is_no_head(tmp_path: Path) -> None:
    assert not is_head_ref(tmp_path / "HEAD")
    (tmp_path / "HEAD").mkdir()
    assert not is_head_ref(tmp_path / "HEAD")


@requires_git
def test_layouts_are_the_repositories_git_finds(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "bare").mkdir()
    git(tmp_path, "init", "-q")
    git(tmp_path / "a" / "b", "init", "-q")
    git(tmp_path / "bare", "init", "-q", "--bare", ".")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / ".git").write_text("gitdir: ../.git\n")
    found = {(g.entry.relative_to(tmp_path).as_posix(), g.bare) for g in git_layouts(tmp_path)}
    assert found == {(".git", False), ("a/b/.git", False), ("bare/HEAD", True), ("x/.git", False)}
    # git agrees that the bare folder is a repository of its own.
    assert git(tmp_path / "bare", "rev-parse", "--is-bare-repository") == "true"
    assert is_git_dir(tmp_path / "bare") and not is_git_dir(tmp_path / "a")


@requires_git
def test_read_paths_follow_hooks_path_and_includes(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "core.hooksPath", ".husky/_")
    git(tmp_path, "config", "include.path", "../team.gitconfig")
    (tmp_path / "team.gitconfig").write_text("[include]\n\tpath = more.gitconfig\n")
    (layout,) = git_layouts(tmp_path)
    paths = git_read_paths(layout)
    root = Path(os.path.realpath(tmp_path))
    assert paths[root / ".git"] is False
    assert paths[root / ".husky"] is False
    assert paths[root / "team.gitconfig"] is True
    assert paths[root / "more.gitconfig"] is True  # included by the included file


def test_git_path_rule(tmp_path: Path) -> None:
    root = Path(os.path.realpath(tmp_path))
    assert is_git_path(root, root / "src" / ".Git" / "config")
    assert is_git_path(root, root / "HEAD")
    assert is_git_path(root, root / "src" / "main.py") is None
    assert is_git_path(root, root / "HEADER.md") is None
