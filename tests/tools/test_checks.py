"""The parse checks a file change meets before a reviewer sees it, and test commands."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from continual_lsp.tools import checks
from continual_lsp.tools.checks import (
    Suite,
    breaks,
    checker,
    is_check,
    is_test_file,
    parse_error,
    ran_no_tests,
    runs_tests,
    workspace_suite,
)

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


@pytest.mark.parametrize(
    ("path", "good", "bad", "where"),
    [
        # the model closed the JSON string at the quote: the file of issue 30
        ("hello.py", "def hello():\n    print('hi')\n", "def hello():\n    print(f", "line 2"),
        # compile, not ast.parse: a return outside a function is refused too
        ("a.py", "x = 1\n", "x = 1\nreturn x\n", "line 2"),
        ("package.json", '{"name": "a"}\n', '{"name": "a",}\n', "line 1"),
        ("pyproject.toml", '[project]\nname = "a"\n', '[project\nname = "a"\n', "line 1"),
        ("ci.yml", "a: 1\nb: [1, 2]\n", "a: 1\nb: [1, 2\n", "line 3"),
    ],
)
def test_a_change_that_stops_a_file_parsing_is_named_with_its_line(
    path: str, good: str, bad: str, where: str
) -> None:
    assert parse_error(path, good) is None
    error = parse_error(path, bad)
    assert error is not None and where in error
    assert breaks(path, good, bad) == error
    assert breaks(path, None, bad) == error  # a new file that does not parse
    assert breaks(path, good, good) is None


def test_a_file_that_did_not_parse_before_is_not_the_changes_fault() -> None:
    assert breaks("a.py", "def (:\n", "def (:\nx = 1\n") is None
    assert breaks("a.json", "{", "{ ") is None


def test_files_without_a_checker_are_never_called_broken() -> None:
    for path in ("notes.md", "Makefile", "tsconfig.json", ".vscode/settings.json", "a.rs"):
        assert checker(path) is None, path
        assert breaks(path, None, "{{{ (((") is None


@needs_node
@pytest.mark.parametrize("path", ["app.js", "lib/mod.mjs", "c.cjs"])
def test_javascript_goes_through_node_check(path: str) -> None:
    assert (
        parse_error(path, "export const a = 1;\n" if path.endswith(".mjs") else "const a = 1;\n")
        is None
    )
    error = parse_error(path, "const a = 1;\nfunction f( {\n")
    assert error is not None and "SyntaxError" in error


@pytest.mark.parametrize(
    ("cmd", "tests"),
    [
        ("python3 -m pytest -q", True),
        ("pytest tests/test_ops.py -x", True),
        ("cd app && npm test", True),
        ("npm run test -- --watch=false", True),
        ("node --test", True),
        ("python -m unittest discover", True),
        ("go test ./...", True),
        ("cargo test", True),
        ("pip install pytest-cov", False),
        ("cat pytest.ini", False),
        ("npm install", False),
        ("echo testing", False),
        ("ls tests", False),
    ],
)
def test_what_counts_as_a_test_run(cmd: str, tests: bool) -> None:
    assert runs_tests(cmd) is tests


@pytest.mark.parametrize(
    ("cmd", "task", "check"),
    [
        ("python3 -m pytest -q", "Fix the bug.", True),  # a test run always checks
        ("python3 -m app.report", "python3 -m app.report exits with an error.", True),
        ("node  src/run.js", "Our script invoked as `node src/run.js` is broken", True),
        # named in part, or only its program, or one word: not the task's check
        ("python3 -m app", "python3 -m app.report exits with an error.", False),
        ("python3 other.py", "python3 -m app.report exits with an error.", False),
        ("make", "make the bound inclusive", False),
        ("ls -la", "tools -la", False),
    ],
)
def test_what_checks_a_task(cmd: str, task: str, check: bool) -> None:
    assert is_check(cmd, task) is check


@pytest.mark.parametrize(
    ("path", "test"),
    [
        ("tests/test_ops.py", True),
        ("src/test_ops.py", True),
        ("pkg/ops_test.go", True),
        ("web/app.test.js", True),
        ("src/__tests__/x.js", True),
        ("src/ops.py", False),
        ("testing.py", False),
        ("lib/contest.py", False),
    ],
)
def test_what_a_test_file_is(path: str, test: bool) -> None:
    assert is_test_file(path) is test


NPM_PLACEHOLDER = 'echo "Error: no test specified" && exit 1'
FAILING_JS_TEST = (
    "const test = require('node:test');\nconst assert = require('node:assert');\n"
    "test('adds', () => assert.strictEqual(1 + 1, 3));\n"
)


def _files(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.mark.parametrize(
    ("files", "suite"),
    [
        # npm's placeholder is no test script: the test files say how
        (
            {
                "package.json": json.dumps({"scripts": {"test": NPM_PLACEHOLDER}}),
                "tests/a.test.js": "",
            },
            Suite("node --test", "tests/a.test.js"),
        ),
        (
            {"package.json": json.dumps({"scripts": {"test": "jest"}}), "tests/a.test.js": ""},
            Suite("npm test", "package.json"),
        ),
        # a package.json that does not load is read as none
        ({"package.json": "{", "test/run.mjs": ""}, Suite("node --test", "test/run.mjs")),
        # files `node --test` does not find alone are named to it
        (
            {"tests/math.js": "", "tests/util.js": ""},
            Suite("node --test tests/*.js", "tests/math.js"),
        ),
        ({"src/a.spec.js": ""}, Suite("node --test src/*.spec.js", "src/a.spec.js")),
        # JavaScript before Python; node_modules and dot-folders are never searched
        ({"tests/test_a.py": "", "web/app.test.cjs": ""}, Suite("node --test", "web/app.test.cjs")),
        (
            {"node_modules/x/a.test.js": "", ".venv/lib/test_site.py": "", "pkg/ops_test.py": ""},
            Suite("python3 -m pytest -q", "pkg/ops_test.py"),
        ),
        ({"src/app.py": "", "README.md": "", "node_modules/x/a.test.js": ""}, None),
    ],
    ids=[
        "npm-placeholder",
        "npm-test",
        "bad-package-json",
        "tests-dir",
        "spec",
        "js-first",
        "skipped-dirs",
        "none",
    ],
)
def test_the_workspaces_own_test_command(
    tmp_path: Path, files: dict[str, str], suite: Suite | None
) -> None:
    assert workspace_suite(_files(tmp_path, files)) == suite


def test_the_search_for_tests_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _files(tmp_path, {f"a/f{i}.txt": "" for i in range(10)} | {"tests/test_a.py": ""})
    assert workspace_suite(tmp_path) == Suite("python3 -m pytest -q", "tests/test_a.py")
    monkeypatch.setattr(checks, "MAX_SUITE_ENTRIES", 8)
    assert workspace_suite(tmp_path) is None


@pytest.mark.parametrize(
    ("output", "exit_code", "none"),
    [
        ("No tests found, exiting with code 1\n", 1, True),  # jest
        ("No test files found, exiting with code 1\n", 1, True),  # vitest
        ('Error: No test files found: "test"\n', 1, True),  # mocha
        ("\nRan 0 tests in 0.000s\n\nOK\n", 0, True),  # unittest
        ("\u2139 tests 0\n\u2139 pass 0\n", 0, True),  # node --test, spec reporter
        ("bash: line 1: node:test: command not found\n", 127, True),
        (
            '> calc@1.0.0 test\n> echo "Error: no test specified" && exit 1\n\nError: no test specified\n',
            1,
            True,
        ),
        ("\u2139 tests 10\n\u2139 fail 1\n", 1, False),
        ("3 passed, 2 deselected in 0.10s\n", 0, False),
        ("src/a.js:1: // no tests found here\n", 0, False),  # a grep, not a runner
        ("ok\n", 5, False),  # a script's own status 5 is not pytest's
    ],
)
def test_what_says_no_test_ran(output: str, exit_code: int, none: bool) -> None:
    assert ran_no_tests(output, exit_code) is none


def _run(argv: list[str], cwd: Path) -> tuple[str, int]:
    proc = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    return proc.stdout + proc.stderr, proc.returncode


@pytest.mark.parametrize(
    ("args", "files", "none"),
    [
        ([], {"tests/a.test.js": FAILING_JS_TEST}, True),  # pytest in a JavaScript project
        (["green", "again"], {}, True),  # words from the task: no such paths
        (["-k", "nothing"], {"test_a.py": "def test_a():\n    assert False\n"}, True),
        ([], {"test_a.py": "def test_a():\n    assert False\n"}, False),
    ],
    ids=["js-project", "not-paths", "all-deselected", "a-failure"],
)
def test_a_real_pytest_run_that_ran_no_test(
    tmp_path: Path, args: list[str], files: dict[str, str], none: bool
) -> None:
    _files(tmp_path, files)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    output, status = _run(argv, tmp_path)
    assert status != 0
    assert ran_no_tests(output, status) is none, output


@needs_node
@pytest.mark.parametrize(
    ("args", "files", "none"),
    [
        ([], {"src/app.py": ""}, True),
        (["tests/missing.test.js"], {}, True),
        ([], {"tests/a.test.js": FAILING_JS_TEST}, False),
        ([], {"tests/a.test.js": FAILING_JS_TEST.replace("3", "2")}, False),
    ],
    ids=["no-test-files", "missing-file", "a-failure", "a-pass"],
)
def test_a_real_node_test_run_that_ran_no_test(
    tmp_path: Path, args: list[str], files: dict[str, str], none: bool
) -> None:
    _files(tmp_path, files)
    output, status = _run(["node", "--test", *args], tmp_path)
    assert ran_no_tests(output, status) is none, output


def test_a_command_the_shell_cannot_find_ran_no_test(tmp_path: Path) -> None:
    output, status = _run(["bash", "-c", "node:test"], tmp_path)
    assert status == 127 and ran_no_tests(output, status)
