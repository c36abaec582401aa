"""Where a failing check's output points (`tools.failures`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from continual_lsp.tools.failures import missing_files, named_files


def _ws(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_a_traceback_names_the_source_not_the_test_nor_what_is_installed(tmp_path: Path) -> None:
    ws = _ws(tmp_path, {"svc/report.py": "", "tests/test_report.py": "", "README.md": ""})
    output = (
        "tests/test_report.py:5: in test_total\n"
        "svc/report.py:3: in total\n"
        "/usr/lib/python3/site-packages/svc/report.py:1\n"
        "E   NameError: name 'totl' is not defined\n"
    )
    assert named_files(output, ws) == ["svc/report.py"]
    # a path that climbs out of the workspace is not followed, even where it exists
    assert named_files(f"../{ws.name}/svc/report.py:3", ws) == []


def test_an_absolute_path_under_another_root_is_matched_by_its_tail(tmp_path: Path) -> None:
    ws = _ws(tmp_path, {"app/run.js": ""})
    output = "    at Object.<anonymous> (/sandbox/ws/app/run.js:3:10)\n"
    output += "Error: ENOENT: no such file or directory, open '/sandbox/ws/data/x.json'\n"
    assert named_files(output, ws) == ["app/run.js"]


def test_a_failing_assertion_points_at_what_the_test_imports(tmp_path: Path) -> None:
    """The output names only the test: the code under test is what it imports, a
    package's own modules before its `__init__`."""
    ws = _ws(
        tmp_path,
        {
            "tests/test_ops.py": "import os\nfrom calc import mean\n",
            "src/calc/__init__.py": "from .ops import mean\n",
            "src/calc/ops.py": "def mean(v): ...\n",
            "test/t.test.js": "const { f } = require('../lib/f');\nimport g from './g.js';\n",
            "lib/f.js": "",
        },
    )
    assert named_files("tests/test_ops.py:9: AssertionError", ws) == [
        "src/calc/ops.py",
        "src/calc/__init__.py",
    ]
    # `./g.js` does not exist; a path that leaves the workspace is not followed
    assert named_files("not ok 1 - test/t.test.js:2", ws) == ["lib/f.js"]


@pytest.mark.parametrize(
    ("output", "missing"),
    [
        (
            "FileNotFoundError: [Errno 2] No such file or directory: '/sandbox/ws/data/a.txt'",
            ["data/a.txt"],
        ),
        ("Error: ENOENT: no such file or directory, open '/tmp/w/data/b.csv'", ["data/b.csv"]),
        ("cat: data/c.txt: No such file or directory", ["data/c.txt"]),
        # there after all, outside the workspace, or in a folder it does not have
        ("No such file or directory: 'data/kept.txt'", []),
        ("No such file or directory: '../data/a.txt'", []),
        ("No such file or directory: 'build/out/a.txt'", []),
    ],
)
def test_a_file_the_output_says_is_missing(tmp_path: Path, output: str, missing: list[str]) -> None:
    ws = _ws(tmp_path, {"data/kept.txt": ""})
    assert missing_files(output, ws) == missing
