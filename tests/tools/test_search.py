"""glob and grep against patterns meant to freeze the server (issue 15, item 3).

Each attack runs in a child interpreter with a deadline: on a backtracking engine it
holds the GIL for hours, and a thread in this process could not even be timed out.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from continual_lsp.config import Settings
from continual_lsp.tools import ToolCall, ToolError, ToolRunner

DEADLINE_S = 20


def _run_in_child(root: Path, tool: str, pat: str) -> str:
    code = textwrap.dedent(
        f"""
        from continual_lsp.config import Settings
        from continual_lsp.tools import ToolCall, ToolRunner
        ws = ToolRunner({str(root)!r}, Settings(sandbox="none"))
        print(ws.execute(ToolCall(tool={tool!r}, arguments={{"pat": {pat!r}}})).output)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=DEADLINE_S
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_catastrophic_grep_regex_returns_at_once(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a" * 40 + "!\n" + "aaaa\n")
    assert _run_in_child(tmp_path, "grep", "(a+)+$") == "a.txt:2:aaaa\n"


def test_glob_with_many_double_stars_returns_at_once(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["a"] * 30)
    deep.mkdir(parents=True)
    (deep / "y").write_text("")
    assert "No files match" in _run_in_child(tmp_path, "glob", "**/" * 30 + "x")


def test_backtracking_only_syntax_is_refused_clearly(tmp_path: Path) -> None:
    ws = ToolRunner(tmp_path, Settings(sandbox="none"))
    (tmp_path / "a.txt").write_text("ab\n")
    with pytest.raises(ToolError, match="RE2 syntax"):
        ws.execute(ToolCall(tool="grep", arguments={"pat": "a(?=b)"}))
    out = ws.execute(ToolCall(tool="grep", arguments={"pat": r"\bab\b"})).output
    assert out == "a.txt:1:ab"


def test_non_utf8_file_names_come_out_as_valid_text(tmp_path: Path) -> None:
    """Issue 15: a name with a byte that is not UTF-8 reached the tokenizer as a lone
    surrogate and killed the task."""
    import os

    with open(os.path.join(os.fsencode(tmp_path), b"bad\xffname.txt"), "w") as fh:
        fh.write("needle\n")
    ws = ToolRunner(tmp_path, Settings(sandbox="none"))
    for tool, pat in (("glob", "*.txt"), ("grep", "needle")):
        out = ws.execute(ToolCall(tool=tool, arguments={"pat": pat})).output
        out.encode("utf-8")  # raises on a lone surrogate
        assert "bad\\xffname.txt" in out


def test_listed_files_are_what_glob_sees_up_to_a_limit(tmp_path: Path) -> None:
    """The files paths are decoded from: the search tools' view (no .git, no
    node_modules), none that cannot be written as text, and no list at all past the
    limit or at 0."""
    import os

    for name in ("src/a.py", "README.md", ".git/config", "node_modules/x/i.js"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    with open(os.path.join(os.fsencode(tmp_path), b"bad\xffname.txt"), "w") as fh:
        fh.write("x\n")
    ws = ToolRunner(tmp_path, Settings(sandbox="none"))
    assert ws.listed_files(3) == ["README.md", "src/a.py"]
    assert ws.listed_files(2) is None
    assert ws.listed_files(0) is None
