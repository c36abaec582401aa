"""The workspace jail: every path a tool touches resolves inside the workspace root.

A path is resolved the way the kernel would follow it (``..`` and symlinks included),
and only then compared with the root, so neither ``a/../../x`` nor a symlink planted
inside the workspace that points out of it can reach a file outside.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from continual_lsp.tools.base import PathEscapeError, ToolError

__all__ = ["display", "is_inside", "real_root", "resolve"]


def real_root(root: str | os.PathLike[str]) -> Path:
    """The canonical root: absolute, symlinks resolved; it must be an existing directory."""
    path = Path(os.path.realpath(os.fspath(root)))
    if not path.is_dir():
        raise ToolError(f"workspace root {os.fspath(root)!r} is not a directory")
    return path


def is_inside(root: Path, path: Path) -> bool:
    """True if `path` (already canonical) is `root` or below it; `root` must be canonical."""
    return path == root or path.is_relative_to(root)


def _check_text(path: str) -> None:
    if not path:
        raise ToolError("empty path")
    if "\x00" in path:
        raise ToolError("path contains a NUL byte")
    try:
        os.fsencode(path)
    except UnicodeError as exc:
        # Lone surrogates cannot name a file on a POSIX file system; say so plainly.
        raise ToolError(f"path {path!r} is not valid text for a file name") from exc


def resolve(root: str | os.PathLike[str], path: str) -> Path:
    """Resolve `path` (relative to `root`, or absolute) to a canonical path inside `root`.

    Raises PathEscapeError if the path, after ``..`` and symlinks are followed, lies
    outside the root. The result may not exist yet (a file about to be written).
    """
    _check_text(path)
    base = real_root(root)
    if path == "~" or path.startswith("~/"):
        raise PathEscapeError(
            f"path {path!r} refers to the home directory, outside the workspace; "
            "use a path relative to the workspace root"
        )
    candidate = Path(path) if os.path.isabs(path) else base / path
    # realpath (strict=False) follows every symlink that exists, dangling ones included,
    # and normalises `..` only after following the link before it, as the kernel does.
    resolved = Path(os.path.realpath(candidate))
    if not is_inside(base, resolved):
        raise PathEscapeError(
            f"path {path!r} resolves to {resolved}, outside the workspace {base}; "
            "tools may only touch files inside the workspace"
        )
    return resolved


def display(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> str:
    """`path` relative to `root` with POSIX separators ("." for the root itself)."""
    base = Path(os.path.realpath(os.fspath(root)))
    target = Path(os.fspath(path))
    if not target.is_absolute():
        target = base / target
    try:
        rel = target.relative_to(base)
    except ValueError:
        rel = Path(os.path.realpath(target)).relative_to(base)
    text = PurePosixPath(*rel.parts).as_posix() if rel.parts else "."
    return text
