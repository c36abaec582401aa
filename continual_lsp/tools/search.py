"""glob and grep over the workspace: sorted, relative, bounded, never outside the root.

Patterns come from the model and run without review (read-only tools are
auto-approved), so both compile to RE2, which matches in linear time: a backtracking
engine holds the GIL for hours on `(a+)+$` or a glob of thirty `**/`, and the whole
server with it. RE2 has no lookaround and no backreferences; such a pattern is
refused with a clear error. Walks stop after SEARCH_TIME_BUDGET_S.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from continual_lsp.tools.base import PathEscapeError, ToolError, ToolResult
from continual_lsp.tools.globs import compile_re2, glob_regex
from continual_lsp.tools.jail import display, is_inside
from continual_lsp.tools.output import cap_text, looks_binary

__all__ = [
    "MAX_GLOB_RESULTS",
    "SKIP_DIRS",
    "iter_files",
    "run_glob",
    "run_grep",
]

# Version-control metadata, caches and dependency trees: rarely what a search means,
# and often most of the files. A pattern that names one of them walks it anyway.
SKIP_DIRS: frozenset[str] = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".jj",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        ".idea",
        ".eggs",
    }
)
MAX_GLOB_RESULTS = 1000
MAX_GREP_FILE_BYTES = 5 * 1024 * 1024
MAX_GREP_LINE_CHARS = 500
SEARCH_TIME_BUDGET_S = 20.0


def iter_files(
    root: Path, base: Path, *, walk_dirs: frozenset[str] = frozenset()
) -> Iterator[Path]:
    """Files below `base` in sorted order, not following symlinked directories.

    Directories in SKIP_DIRS are pruned unless named in `walk_dirs`. A symlinked file
    is yielded only if it resolves inside `root`.
    """
    if base.is_file():
        yield base
        return
    for current, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS or d in walk_dirs)
        here = Path(current)
        for name in sorted(filenames):
            path = here / name
            if path.is_symlink():
                target = Path(os.path.realpath(path))
                if not is_inside(root, target) or not target.is_file():
                    continue
            elif not path.is_file():
                continue  # sockets, fifos: nothing to list or read
            yield path


def _printable(name: str) -> str:
    """A file name as valid text: bytes that are not UTF-8 (surrogate escapes from the
    file system) are shown as `\\xff`, never passed on as lone surrogates that no
    encoder or tokenizer accepts."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _glob_base(root: Path, pat: str, base: Path) -> tuple[Path, str]:
    if os.path.isabs(pat):
        # An absolute pattern inside the workspace is fine; it is matched from the root.
        prefix = str(root).rstrip("/") + "/"
        if not pat.startswith(prefix):
            raise PathEscapeError(f"glob pattern {pat!r} points outside the workspace {root}")
        return root, pat[len(prefix) :]
    return base, pat


def run_glob(root: Path, pat: str, base: Path, output_cap: int) -> ToolResult:
    """Files under `base` (a directory inside `root`) matching `pat`, sorted, root-relative.

    A pattern without `/` matches file names at any depth (like `**/pat`); a pattern
    with `/` is anchored at `base`.
    """
    if not base.exists():
        raise ToolError(f"no such directory: {display(root, base)}")
    if not base.is_dir():
        raise ToolError(f"{display(root, base)} is not a directory; glob needs a directory")
    base, pat = _glob_base(root, pat, base)
    while pat.startswith("./"):
        pat = pat[2:]
    parts = PurePosixPath(pat).parts
    if ".." in parts:
        raise PathEscapeError(
            f"glob pattern {pat!r} contains '..'; pass the directory as `path` instead"
        )
    if not pat:
        raise ToolError("empty glob pattern")
    anchored = "/" in pat.rstrip("/")
    regex = glob_regex(pat.rstrip("/"))
    walk_dirs = frozenset(p for p in parts if p in SKIP_DIRS)
    matches: list[str] = []
    started = time.monotonic()
    stopped = False
    for path in iter_files(root, base, walk_dirs=walk_dirs):
        if time.monotonic() - started > SEARCH_TIME_BUDGET_S:
            stopped = True
            break
        rel_to_base = path.relative_to(base).as_posix()
        subject = _printable(rel_to_base if anchored else path.name)
        if regex.match(subject):
            matches.append(_printable(display(root, path)))
    stop_note = f"\n[search stopped after {SEARCH_TIME_BUDGET_S:g} s; narrow the path]"
    if not matches:
        where = display(root, base)
        text = f"No files match {pat!r} under {where}"
        return ToolResult(ok=True, output=text + (stop_note if stopped else ""), truncated=stopped)
    matches.sort()
    extra = len(matches) - MAX_GLOB_RESULTS
    shown = matches[:MAX_GLOB_RESULTS]
    text = "\n".join(shown)
    if extra > 0:
        text += f"\n[{extra} more files not listed; narrow the pattern or the path]"
    text, cut = cap_text(text, output_cap)
    if stopped:
        text += stop_note
    return ToolResult(ok=True, output=text, truncated=cut or extra > 0 or stopped)


def run_grep(root: Path, pat: str, base: Path, output_cap: int) -> ToolResult:
    """Lines matching the RE2 regex `pat` in files under `base`, as `file:line:text`.

    Binary files (a NUL byte in the first 8 KiB) and files over 5 MiB are skipped.
    """
    regex = compile_re2(pat, "regular expression", pat)
    if not base.exists():
        raise ToolError(f"no such file or directory: {display(root, base)}")
    if base.is_file():
        with open(base, "rb") as fh:
            if looks_binary(fh.read(8192)):
                return ToolResult(
                    ok=True,
                    output=f"{display(root, base)} is a binary file; grep skips binary files",
                )
    started = time.monotonic()
    lines: list[str] = []
    size = 0
    matches = 0
    skipped_large = 0
    stop_note: str | None = None
    for path in iter_files(root, base):
        if time.monotonic() - started > SEARCH_TIME_BUDGET_S:
            stop_note = f"search stopped after {SEARCH_TIME_BUDGET_S:g} s; narrow the path"
            break
        try:
            if path.stat().st_size > MAX_GREP_FILE_BYTES:
                skipped_large += 1
                continue
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            continue  # unreadable files are skipped, as grep -s would
        if looks_binary(data):
            continue
        rel = _printable(display(root, path))
        text = data.decode("utf-8", errors="replace")
        for number, line in enumerate(text.split("\n"), start=1):
            line = line.removesuffix("\r")
            if not regex.search(line):
                continue
            if len(line) > MAX_GREP_LINE_CHARS:
                line = line[:MAX_GREP_LINE_CHARS] + " [...]"
            entry = f"{rel}:{number}:{line}"
            if size + len(entry) + 1 > output_cap:
                stop_note = (
                    f"output truncated at {output_cap} characters after {matches} matches; "
                    "narrow the pattern or the path"
                )
                break
            lines.append(entry)
            size += len(entry) + 1
            matches += 1
        if stop_note:
            break
    output = "\n".join(lines) if lines else f"No matches for {pat!r} under {display(root, base)}"
    notes = []
    if skipped_large:
        notes.append(
            f"{skipped_large} files over {MAX_GREP_FILE_BYTES // (1024 * 1024)} MiB skipped"
        )
    if stop_note:
        notes.append(stop_note)
    if notes:
        output += "\n[" + "; ".join(notes) + "]"
    return ToolResult(ok=True, output=output, truncated=stop_note is not None)
