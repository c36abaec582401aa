"""Where git finds a repository, and which files it then reads as config or runs.

The host's git (the user's shell, an editor's source-control view) trusts what it finds:
`core.fsmonitor`, hooks, aliases, `core.worktree` and included config files name
programs it runs outside any sandbox. From a directory D, git's discovery takes the
first of, for D and then each parent:

- ``D/.git``: a directory, a symlink to one, or a file ``gitdir: <path>``;
- D itself, as a bare repository, when ``D/HEAD`` is a valid head reference and
  ``D/objects`` and ``D/refs`` exist (or ``D/commondir`` names a directory that has
  them). `git init --bare .` makes any folder one.

`git_layouts` finds both kinds under a root; `git_read_paths` names the files and
directories of one layout that git reads as config or runs; `is_git_path` is the rule the
file tools apply. Nothing here runs git except `git config --file`, which parses one
file and runs nothing (no discovery, no hooks, no fsmonitor).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GitLayout", "git_dirs", "git_layouts", "git_read_paths", "is_git_dir", "is_git_path"]

_HEX_OID = re.compile(rb"^[0-9a-f]{40}([0-9a-f]{24})?\s*$")
MAX_INCLUDE_DEPTH = 5  # git's own limit is 10; a deeper chain is not followed here


@dataclass(frozen=True)
class GitLayout:
    """One place git would take for a repository: `entry` is a ``.git`` (of any kind) or,
    for a bare layout, the folder's ``HEAD``; `identity` is its (device, inode), so a
    layout that was only moved is recognised as the same one."""

    entry: Path
    bare: bool
    identity: tuple[int, int]

    @property
    def where(self) -> Path:
        """The folder from which git finds this repository."""
        return self.entry.parent


def is_head_ref(path: Path) -> bool:
    """True if git would accept `path` as a HEAD (git's `validate_headref`)."""
    try:
        if path.is_symlink():
            return os.readlink(path).startswith("refs/")
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:  # missing, or a directory (reading one fails as it does for git)
        return False
    if head.startswith(b"ref:"):
        return head[4:].strip().startswith(b"refs/")
    return _HEX_OID.match(head) is not None


def is_git_dir(folder: Path) -> bool:
    """True if git would take `folder` itself for a repository (git's `is_git_directory`)."""
    if not is_head_ref(folder / "HEAD"):
        return False
    common = folder
    with contextlib.suppress(OSError, UnicodeError):
        named = (folder / "commondir").read_text(encoding="utf-8").strip()
        common = folder / named
    return (common / "objects").is_dir() and (common / "refs").is_dir()


def git_layouts(root: Path) -> list[GitLayout]:
    """Every ``.git`` entry and every bare-repository folder under `root` (root included).

    Symlinks are not followed, and a layout's own database is not walked.
    """
    found: list[GitLayout] = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        names = set(dirs) | set(files)
        if ".git" in names:
            found += _layout(here / ".git", bare=False)
        if "HEAD" in names and is_git_dir(here):
            found += _layout(here / "HEAD", bare=True)
            dirs.clear()
            continue
        dirs[:] = [d for d in dirs if d != ".git"]
    return found


def _layout(entry: Path, *, bare: bool) -> list[GitLayout]:
    try:
        st = entry.lstat()
    except OSError:
        return []
    return [GitLayout(entry, bare, (st.st_dev, st.st_ino))]


def git_dirs(layout: GitLayout) -> list[Path]:
    """The git directories (resolved) whose config applies to `layout`."""
    if layout.bare:
        first = layout.where
    elif layout.entry.is_dir():  # a directory, or a symlink to one
        first = layout.entry
    else:
        try:
            line = layout.entry.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return []
        if not line.startswith("gitdir:"):
            return []
        first = layout.where / line.removeprefix("gitdir:").strip()
    first = Path(os.path.realpath(first))
    dirs = [first]
    with contextlib.suppress(OSError, UnicodeError):
        common = (first / "commondir").read_text(encoding="utf-8").strip()
        dirs.append(Path(os.path.realpath(first / common)))
    return dirs


def _config_values(config: Path) -> list[tuple[str, str]]:
    """(key, value) of `core.hooksPath` and every include path set in one config file."""
    git = shutil.which("git")
    if git is None or not config.is_file():
        return []
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1"}
    pattern = r"^(core\.hookspath|include\.path|includeif\..*\.path)$"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            [git, "config", "--file", str(config), "--null", "--get-regexp", pattern],
            capture_output=True,
            env=env,
            timeout=5,
            check=False,
        )
        pairs = []
        for item in out.stdout.decode("utf-8", "replace").split("\0"):
            key, _, value = item.partition("\n")
            if key:
                pairs.append((key.lower(), value))
        return pairs
    return []


def git_read_paths(layout: GitLayout) -> dict[Path, bool]:
    """What git reads as config or runs for `layout` (resolved; may not exist yet), each
    with whether it is a file: its git directories, every configured hooks directory and
    every included config file (followed MAX_INCLUDE_DEPTH deep).

    A hooks path ending in ``/_`` (husky) gives its parent, whose scripts ``_`` sources.
    """
    paths: dict[Path, bool] = {}
    configs: list[tuple[Path, int]] = []
    for gitdir in git_dirs(layout):
        paths[gitdir] = False
        configs += [(gitdir / "config", 0), (gitdir / "config.worktree", 0)]
    while configs:
        config, depth = configs.pop()
        for key, value in _config_values(config):
            value = os.path.expanduser(value.strip())
            if key == "core.hookspath":
                # A relative hooks path is taken from the work tree (the repository's
                # folder), an include path from the including file's folder.
                hooks = Path(os.path.realpath(layout.where / value))
                paths.setdefault(hooks.parent if hooks.name == "_" else hooks, False)
            else:
                included = Path(os.path.realpath(config.parent / value))
                paths.setdefault(included, True)
                if depth < MAX_INCLUDE_DEPTH:
                    configs.append((included, depth + 1))
    return paths


def is_git_path(root: Path, path: Path) -> str | None:
    """Why a file tool must not write `path` (canonical, inside canonical `root`), or None.

    Refused: anything inside a ``.git`` (any case), a file named ``HEAD`` (the one file
    that turns a folder into a repository), and anything inside a folder git would take
    for a repository.
    """
    rel = path.relative_to(root)
    for part in rel.parts:
        if part.casefold() == ".git":
            return f"{rel.as_posix()} is inside a .git directory"
    if path.name.casefold() == "head":
        return f"{rel.as_posix()}: a file named HEAD makes its folder a git repository"
    for folder in (path.parent, *path.parent.parents):
        if is_git_dir(folder):
            return f"{rel.as_posix()} is inside a git repository's directory ({folder})"
        if folder == root:
            break
    return None
