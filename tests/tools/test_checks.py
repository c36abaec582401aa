"""The parse checks a file change meets before a reviewer sees it, and test commands."""

from __future__ import annotations

import shutil

import pytest

from continual_lsp.tools.checks import (
    breaks,
    checker,
    is_check,
    is_test_file,
    parse_error,
    runs_tests,
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
