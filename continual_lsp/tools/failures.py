"""Where a failing check's output points: the workspace files to look at before a fix,
and the files it says are missing.

A traceback or stack trace names files (`svc/report.py:3: in total`, `at f
(/ws/app/run.js:4:1)`); an assertion that fails in a test names only the test, and the
code under test is what the test imports. A program that opens a file that is not there
says so (`No such file or directory: '/ws/data/x.txt'`, `ENOENT: … open 'data/x.csv'`).
All are read from the output and the workspace, never by running anything.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from continual_lsp.tools.checks import is_test_file

# A path with a file extension, as a traceback or stack trace writes it.
_PATH = re.compile(r"(?:file://)?[\w./-]*[\w-]\.[A-Za-z]{1,5}\b")
_INSTALLED = frozenset({"node_modules", "site-packages", "dist-packages", ".venv", ".git"})
_PY_IMPORT = re.compile(r"^\s*(?:from\s+(\.*[\w.]*)\s+import|import\s+([\w.]+))", re.M)
_JS_IMPORT = re.compile(r"""(?:require\(\s*|\bfrom\s+|\bimport\s+)['"](\.{1,2}/[^'"]+)['"]""")
_JS_SUFFIXES = ("", ".js", ".mjs", ".cjs", ".ts", "/index.js")
# A file the output says is not there: Python's and node's quoted path, or the shell's
# `cat: data/x.txt: No such file or directory`.
_MISSING = re.compile(
    r"no such file or directory[:,]?\s*(?:\w+\s+)?['\"]([^'\"\n]+)['\"]"
    r"|([^\s:'\"]*[/.][^\s:'\"]*): no such file or directory",
    re.I,
)


def named_files(output: str, workspace: Path) -> list[str]:
    """The workspace files a failing check's `output` points at, as workspace-relative
    paths, in order: the source files it names, then what the tests it names import.
    Only files that exist, no tests (a change to one does not fix what it tests) and
    nothing installed."""
    named = _mentioned(output, workspace)
    found = [p for p in named if not is_test_file(p)]
    for test in (p for p in named if is_test_file(p)):
        for rel in _imports(test, workspace):
            if rel not in found and not is_test_file(rel):
                found.append(rel)
    return found


def missing_files(output: str, workspace: Path) -> list[str]:
    """The workspace paths a failing check's `output` says are missing (a file that is
    not there, in a folder of the workspace), workspace-relative, first mention first.
    An absolute path is matched by its longest tail whose folder the workspace has."""
    found: list[str] = []
    for match in _MISSING.finditer(output):
        raw = match.group(1) or match.group(2)
        for tail in _tails(raw):
            rel = _normal(tail)
            if rel is None or _INSTALLED.intersection(tail.parts):
                break
            if (workspace / rel).parent.is_dir() and not (workspace / rel).exists():
                if rel not in found:
                    found.append(rel)
                break
    return found


def _mentioned(output: str, workspace: Path) -> list[str]:
    """Existing workspace files the output mentions, first mention first. An absolute
    path is matched by its longest tail that names a workspace file, since a sandbox may
    show the workspace under another root."""
    found: list[str] = []
    for match in _PATH.finditer(output):
        raw = match.group(0).removeprefix("file://")
        for tail in _tails(raw):
            rel = str(tail)
            if ".." in tail.parts:
                break  # outside the workspace: not a file to look at
            if (workspace / rel).is_file():
                if not _INSTALLED.intersection(tail.parts) and rel not in found:
                    found.append(rel)
                break
    return found


def _tails(raw: str) -> list[PurePosixPath]:
    """Where in the workspace a path the output writes may be, likeliest first: a
    relative path as it is; an absolute one by its tails, longest first, since a
    sandbox may show the workspace under another root."""
    parts = PurePosixPath(raw).parts
    if not raw.startswith("/"):
        return [PurePosixPath(raw)]
    return [PurePosixPath(*parts[i:]) for i in range(1, len(parts))]


def _imports(test: str, workspace: Path) -> list[str]:
    """The workspace files the test file `test` imports: Python modules from the root or
    `src/` (a package's `__init__.py` after the modules it imports from itself, where the
    code usually is), JavaScript relative paths."""
    if test.endswith(".py"):
        found: list[str] = []
        for rel in _py_imports(test, workspace):
            if rel.endswith("/__init__.py"):
                found += [r for r in _py_imports(rel, workspace) if r not in found]
            if rel not in found:
                found.append(rel)
        return found
    here = PurePosixPath(test).parent
    found = []
    for match in _JS_IMPORT.finditer(_text(workspace / test)):
        for suffix in _JS_SUFFIXES:
            rel = _normal(here / (match.group(1) + suffix))
            if rel is not None and (workspace / rel).is_file():
                if rel not in found:
                    found.append(rel)
                break
    return found


def _py_imports(source: str, workspace: Path) -> list[str]:
    """The workspace modules a Python file imports, absolute (from the root or `src/`)
    or relative to its package."""
    found: list[str] = []
    package = PurePosixPath(source).parent
    for match in _PY_IMPORT.finditer(_text(workspace / source)):
        name = match.group(1) or match.group(2)
        dots = len(name) - len(name.lstrip("."))
        module = name[dots:].replace(".", "/")
        if dots:
            base = package
            for _ in range(dots - 1):
                base = base.parent
            roots = [f"{base}/" if str(base) != "." else ""]
        else:
            roots = ["", "src/"]
        for root in roots:
            stem = f"{root}{module}".rstrip("/")
            for rel in (f"{stem}.py", f"{stem}/__init__.py"):
                if module and (workspace / rel).is_file() and rel not in found:
                    found.append(rel)
    return found


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _normal(path: PurePosixPath) -> str | None:
    """`path` with `.` and `..` resolved; None when it leaves the workspace."""
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts) or None
