"""The cheapest check that a file still parses, chosen by its name, and what a test run is.

A file change is checked before a reviewer sees it: Python is compiled (`compile`, which
also refuses a `return` outside a function, unlike `ast.parse`), JSON, TOML and YAML
(when PyYAML is importable) are loaded, and JavaScript goes through `node --check` when
node is installed. Nothing here runs the code. A file kind without a checker is never
called broken.

Also said without running anything: whether a command runs tests, whether a test run
ran none (`ran_no_tests`, from its output), and the command that runs a workspace's own
tests (`workspace_suite`, from its files).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import tomllib
import warnings
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import NamedTuple

NODE_CHECK_TIMEOUT_S = 10.0

# The commands whose failure says a test fails: a task's failing check is re-run on a
# copy of the workspace to try a change (the agent's `turns._checked_change`).
_TEST_COMMAND = re.compile(
    r"(?:^|[\s;&|(])(?:"
    r"(?:python3?\s+-m\s+)?(?:pytest|py\.test|unittest)"
    r"|node\s+--test"
    r"|(?:npm|pnpm|yarn|bun)\s+(?:run\s+)?test"
    r"|npx\s+(?:jest|vitest|mocha)|jest|vitest|mocha"
    r"|go\s+test|cargo\s+test"
    r")(?:$|[\s;&|)])"
)

_TEST_DIRS = frozenset({"tests", "test", "__tests__", "spec"})
_TEST_FILE = re.compile(r"^test_.*\.py$|_test\.(?:py|go)$|\.(?:test|spec)\.[cm]?[jt]sx?$")


def runs_tests(cmd: str) -> bool:
    """Whether a shell command runs a test suite (pytest, node --test, npm test, ...)."""
    return _TEST_COMMAND.search(cmd) is not None


def is_check(cmd: str, task: str) -> bool:
    """Whether a shell command checks the task: it runs a test suite, or the task's text
    names it whole, a program and its arguments ("python3 -m app.report exits with an
    error"), so its exit status says whether the task is done. One word is not enough:
    "make the bound inclusive" does not name `make`."""
    if runs_tests(cmd):
        return True
    words = cmd.split()
    if len(words) < 2:
        return False
    named = (
        r"(?<![^\s`'\"(])"
        + r"\s+".join(map(re.escape, words))
        + r"(?=$|[\s`'\")]|[.,;:!?](?:\s|$))"
    )
    return re.search(named, task) is not None


def is_test_file(path: str) -> bool:
    """Whether a workspace path is a test (a change to one does not fix what it tests)."""
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    return any(d in _TEST_DIRS for d in parts[:-1]) or _TEST_FILE.search(name) is not None


# What a test run that ran no test prints: pytest's summary (nothing collected, all
# deselected, a path that does not exist, a usage error, pytest not installed),
# unittest's count, node --test's TAP and spec counts, jest / vitest / mocha's refusal,
# node's word for a test file it was named that does not exist, and npm's placeholder
# test script.
_NO_TESTS = re.compile(
    r"^\s*=*\s*(?:no tests ran|\d+ deselected) in\b"
    r"|^ERROR: usage:|: No module named pytest$"
    r"|^Ran 0 tests\b|^NO TESTS RAN$"
    r"|^(?:#|\N{INFORMATION SOURCE}) tests 0$"
    r"|^(?:Error: )?No test(?:s| files)? found\b"
    r"|^Could not find '"
    r"|^Error: no test specified$",
    re.M,
)
# The shell's statuses for a command it could not run: not executable, not found.
_NOT_RUN = frozenset({126, 127})


def ran_no_tests(output: str, exit_code: int | None) -> bool:
    """Whether a test run's output and exit status say it ran no test at all: the runner
    found none, or could not start (`node:test` is no command, pytest was named a path
    that does not exist). Such a run says nothing about the code, so it is no check a
    change could turn green. pytest's status 5 is read from its words ("no tests ran"),
    which it always prints: another program's status 5 means something else."""
    return exit_code in _NOT_RUN or _NO_TESTS.search(output) is not None


class Suite(NamedTuple):
    """A workspace's own test command, and the file that says so."""

    cmd: str
    source: str


# At most this many files and folders are looked at for tests: a workspace's tests sit
# near its root, and a turn must not wait on a walk through a huge tree.
MAX_SUITE_ENTRIES = 2000
# Never searched for a workspace's tests (dot-folders aside): installed code and caches.
_NOT_SEARCHED = frozenset({"node_modules", "venv", "site-packages", "__pycache__"})
# `npm init` writes a test script that fails on purpose (`echo "Error: no test
# specified" && exit 1`): a package with no tests.
_NPM_PLACEHOLDER = "no test specified"
_JS = (".js", ".mjs", ".cjs")
# The files `node --test` runs when named none (node 20 and later); others must be named.
_NODE_FINDS = re.compile(r"^(?:test|test-.+|.+[._-]test)\.[cm]?js$")
_NAMED_TEST = re.compile(r"\.(?:test|spec)\.[cm]?js$")
_PYTEST_FILE = re.compile(r"^test_.*\.py$|_test\.py$")


def workspace_suite(root: Path) -> Suite | None:
    """The command that runs the workspace's own tests, read from its files (nothing
    runs): a package.json test script (not npm's placeholder) is `npm test`; JavaScript
    tests run with `node --test`; Python tests with `python3 -m pytest -q`; in that
    order. None when it has none. A small model runs pytest in a JavaScript project:
    this says what to run instead."""
    if _has_npm_tests(root / "package.json"):
        return Suite("npm test", "package.json")
    js, py = _test_files(root)
    if js:
        found = [p for p in js if _node_finds(p)]
        if found:
            return Suite("node --test", found[0])
        return Suite(" ".join(["node --test", *sorted({_glob(p) for p in js})]), js[0])
    if py:
        return Suite("python3 -m pytest -q", py[0])
    return None


def _has_npm_tests(path: Path) -> bool:
    try:
        package = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    scripts = package.get("scripts") if isinstance(package, dict) else None
    script = scripts.get("test") if isinstance(scripts, dict) else None
    return isinstance(script, str) and bool(script.strip()) and _NPM_PLACEHOLDER not in script


def _test_files(root: Path) -> tuple[list[str], list[str]]:
    """The JavaScript and the Python test files under `root` (workspace-relative, in a
    stable order), among the first MAX_SUITE_ENTRIES entries walked."""
    js: list[str] = []
    py: list[str] = []
    left = MAX_SUITE_ENTRIES
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _NOT_SEARCHED)
        folder = PurePosixPath(Path(here).relative_to(root).as_posix())
        for name in sorted(files)[:left]:
            rel = str(folder / name)
            if name.endswith(_JS) and is_test_file(rel):
                js.append(rel)
            elif _PYTEST_FILE.search(name):
                py.append(rel)
        left -= 1 + len(files) + len(dirs)
        if left <= 0:
            break
    return js, py


def _node_finds(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return "test" in parts[:-1] or _NODE_FINDS.search(parts[-1]) is not None


def _glob(path: str) -> str:
    """A shell glob naming `path` and its kind in its folder (`tests/*.js`,
    `src/*.spec.js`): `node --test` runs only the files it is named."""
    rel = PurePosixPath(path)
    named = _NAMED_TEST.search(rel.name)
    pattern = "*" + (named.group(0) if named else rel.suffix)
    folder = str(rel.parent)
    return pattern if folder == "." else f"{shlex.quote(folder)}/{pattern}"


def _python(text: str, name: str) -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes warn; they still compile
            compile(text, name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except (ValueError, RecursionError, MemoryError) as exc:
        return str(exc) or type(exc).__name__
    return None


def _json(text: str, name: str) -> str | None:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except RecursionError:
        return "nested too deeply"
    return None


def _toml(text: str, name: str) -> str | None:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return str(exc)
    return None


def _yaml(text: str, name: str) -> str | None:
    import yaml

    try:
        for _ in yaml.safe_load_all(text):
            pass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return f"line {mark.line + 1}: {problem}" if mark is not None else str(problem)
    return None


def _node(text: str, name: str) -> str | None:
    node = shutil.which("node")
    if node is None:
        return None
    with tempfile.TemporaryDirectory(prefix="continual-check-") as tmp:
        # The suffix tells node the module kind (.mjs: ES module, .cjs: CommonJS).
        target = Path(tmp) / ("check" + PurePosixPath(name).suffix)
        target.write_text(text, encoding="utf-8")
        try:
            proc = subprocess.run(
                [node, "--check", str(target)],
                capture_output=True,
                text=True,
                timeout=NODE_CHECK_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None  # no verdict: never call a file broken for a slow checker
    if proc.returncode == 0:
        return None
    lines = proc.stderr.splitlines()
    where = next((ln.rsplit(":", 1)[-1] for ln in lines if ln.startswith(str(target))), "")
    error = next((ln for ln in lines if "Error" in ln), lines[-1] if lines else "node --check")
    return f"line {where}: {error}" if where.isdigit() else error


# Files named like JSON that hold JSON with comments (JSONC): no strict checker.
_JSONC = re.compile(r"(?:^|/)(?:tsconfig[^/]*|jsconfig[^/]*|\.vscode/[^/]*|devcontainer)\.json$")


def checker(path: str) -> Callable[[str, str], str | None] | None:
    """The parse check for `path`'s kind of file, or None when there is none here."""
    suffix = PurePosixPath(path).suffix.lower()
    if suffix in (".py", ".pyi"):
        return _python
    if suffix == ".json" and not _JSONC.search(path):
        return _json
    if suffix == ".toml":
        return _toml
    if suffix in (".yaml", ".yml") and _yaml_importable():
        return _yaml
    if suffix in (".js", ".mjs", ".cjs") and shutil.which("node") is not None:
        return _node
    return None


@functools.cache
def _yaml_importable() -> bool:
    try:
        import yaml  # noqa: F401
    except ImportError:
        return False
    return True


def parse_error(path: str, text: str) -> str | None:
    """Why `text` does not parse as `path`'s kind of file; None when it parses or no
    checker exists for it."""
    check = checker(path)
    return check(text, path) if check is not None else None


def breaks(path: str, old: str | None, new: str) -> str | None:
    """The parse error of a change that leaves `path` not parsing when it parsed before
    (a new file counts as one that parsed); None otherwise. A file that did not parse
    before is not this change's fault."""
    check = checker(path)
    if check is None:
        return None
    error = check(new, path)
    if error is None or (old is not None and check(old, path) is not None):
        return None
    return error
