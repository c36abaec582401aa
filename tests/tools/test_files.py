"""read, write, edit, edit_lines, glob, grep: happy paths, error paths, previews, staleness."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continual_lsp.config import Settings
from continual_lsp.text import split_lines
from continual_lsp.tools import (
    StaleProposalError,
    ToolCall,
    ToolError,
    ToolResult,
    ToolRunner,
)
from continual_lsp.tools.text_edits import apply_edit_lines


def call(tool: str, **arguments: Any) -> ToolCall:
    return ToolCall(tool=tool, arguments=arguments)  # type: ignore[arg-type]


def run(ws: ToolRunner, tool: str, **arguments: Any) -> ToolResult:
    c = call(tool, **arguments)
    return ws.execute(c, preview=ws.preview(c))


# -- read ----------------------------------------------------------------------------


def test_read_numbers_lines_like_cat_n(ws: ToolRunner) -> None:
    (ws.root / "f.py").write_text("one\ntwo\nthree\n")
    result = run(ws, "read", path="f.py")
    assert result.ok and not result.truncated
    assert result.output == "     1\tone\n     2\ttwo\n     3\tthree"


def test_read_offset_and_limit(ws: ToolRunner) -> None:
    (ws.root / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    result = run(ws, "read", path="f.txt", offset=4, limit=2)
    assert result.output.splitlines()[:2] == ["     4\tline 4", "     5\tline 5"]
    assert "offset=6" in result.output
    last = run(ws, "read", path="f.txt", offset=10)
    assert last.output == "    10\tline 10"
    with pytest.raises(ToolError, match="past the end"):
        run(ws, "read", path="f.txt", offset=11)


def test_read_crlf_and_no_final_newline(ws: ToolRunner) -> None:
    (ws.root / "w.txt").write_bytes(b"a\r\nb")
    assert run(ws, "read", path="w.txt").output == "     1\ta\n     2\tb"


def test_read_errors(ws: ToolRunner) -> None:
    (ws.root / "d").mkdir()
    with pytest.raises(ToolError, match="no such file"):
        run(ws, "read", path="missing.txt")
    with pytest.raises(ToolError, match="directory"):
        run(ws, "read", path="d")
    with pytest.raises(ToolError, match="invalid arguments"):
        run(ws, "read", path="x", offset=0)
    with pytest.raises(ToolError, match="invalid arguments"):
        run(ws, "read", path="x", bogus=1)


def test_read_binary_and_empty(ws: ToolRunner) -> None:
    (ws.root / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    result = run(ws, "read", path="img.png")
    assert result.ok and "binary file" in result.output and "\x00" not in result.output
    (ws.root / "empty").write_bytes(b"")
    assert "empty" in run(ws, "read", path="empty").output


def test_read_invalid_utf8_is_replaced(ws: ToolRunner) -> None:
    (ws.root / "latin.txt").write_bytes("café\n".encode("latin-1"))
    assert "caf\ufffd" in run(ws, "read", path="latin.txt").output


def test_read_huge_file_is_capped_with_a_note(tmp_path: Path) -> None:
    ws = ToolRunner(tmp_path, Settings(sandbox="none", output_cap=2000))
    (tmp_path / "big.txt").write_text("".join(f"row {i}\n" for i in range(100_000)))
    result = run(ws, "read", path="big.txt")
    assert result.truncated
    assert len(result.output) < 2400
    assert "output truncated" in result.output and "offset=" in result.output
    long_line = "x" * 10_000
    (tmp_path / "min.js").write_text(long_line + "\n")
    roomy = ToolRunner(tmp_path, Settings(sandbox="none"))
    assert "line cut, 10000 characters" in run(roomy, "read", path="min.js").output


def test_read_never_holds_a_huge_line_whole(tmp_path: Path) -> None:
    """Issue 15: a 400 MB one-line file peaked at 844 MiB even with `limit: 1`."""
    import tracemalloc

    with open(tmp_path / "one.min.js", "wb") as fh:
        for _ in range(48):
            fh.write(b"a" * (1 << 20))
        fh.write(b"\nsecond\n")
    ws = ToolRunner(tmp_path, Settings(sandbox="none"))
    tracemalloc.start()
    try:
        first = run(ws, "read", path="one.min.js", limit=1)
        second = run(ws, "read", path="one.min.js", offset=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak >> 20} MiB"
    assert f"line cut, {48 << 20} characters" in first.output
    assert "offset=2" in first.output
    assert second.output == "     2\tsecond"


# -- write ---------------------------------------------------------------------------


def test_write_creates_parent_dirs_and_previews(ws: ToolRunner) -> None:
    c = call("write", path="pkg/sub/mod.py", content="x = 1\n")
    preview = ws.preview(c)
    assert preview is not None
    assert not (ws.root / "pkg").exists()  # a preview writes nothing
    assert preview.old_content is None and preview.old_sha256 is None
    assert preview.diff.startswith("--- /dev/null\n+++ b/pkg/sub/mod.py\n")
    result = ws.execute(c, preview=preview)
    assert result.ok and "Created pkg/sub/mod.py" in result.output
    assert (ws.root / "pkg" / "sub" / "mod.py").read_text() == "x = 1\n"


def test_write_overwrites_and_keeps_mode(ws: ToolRunner) -> None:
    script = ws.root / "run.sh"
    script.write_text("echo old\n")
    os.chmod(script, 0o755)
    c = call("write", path="run.sh", content="echo new\n")
    preview = ws.preview(c)
    assert preview is not None
    assert preview.old_sha256 == hashlib.sha256(b"echo old\n").hexdigest()
    assert preview.changed_lines == (1, 1)
    assert "-echo old\n+echo new\n" in preview.diff
    assert preview.diff.startswith("--- a/run.sh\n+++ b/run.sh\n")
    ws.execute(c, preview=preview)
    assert script.read_text() == "echo new\n"
    assert script.stat().st_mode & 0o777 == 0o755
    assert not [p for p in ws.root.iterdir() if p.name.endswith(".tmp")]


def test_write_errors(ws: ToolRunner) -> None:
    (ws.root / "d").mkdir()
    (ws.root / "plain").write_text("x")
    with pytest.raises(ToolError, match="directory"):
        run(ws, "write", path="d", content="x")
    with pytest.raises(ToolError):
        run(ws, "write", path="plain/child.txt", content="x")  # parent is a file
    with pytest.raises(ToolError, match="root"):
        run(ws, "write", path=".", content="x")


def test_write_over_binary_file_shows_binary_diff(ws: ToolRunner) -> None:
    (ws.root / "blob.bin").write_bytes(b"\x00\x01\x02")
    preview = ws.preview(call("write", path="blob.bin", content="text\n"))
    assert preview is not None and preview.diff.startswith("Binary files a/blob.bin and b/blob.bin")


# -- edit ----------------------------------------------------------------------------


def test_edit_unique_match(ws: ToolRunner) -> None:
    (ws.root / "m.py").write_text("a = 1\nb = 2\nc = 3\n")
    c = call("edit", path="m.py", old="b = 2", new="b = 20")
    preview = ws.preview(c)
    assert preview is not None and preview.changed_lines == (2, 2)
    assert (ws.root / "m.py").read_text() == "a = 1\nb = 2\nc = 3\n"
    ws.execute(c, preview=preview)
    assert (ws.root / "m.py").read_text() == "a = 1\nb = 20\nc = 3\n"


def test_edit_counts_in_errors(ws: ToolRunner) -> None:
    (ws.root / "m.py").write_text("x\nx\nx\n")
    with pytest.raises(ToolError, match="occurs 3 times"):
        run(ws, "edit", path="m.py", old="x", new="y")
    with pytest.raises(ToolError, match="0 matches"):
        run(ws, "edit", path="m.py", old="zz", new="y")
    with pytest.raises(ToolError, match="identical"):
        run(ws, "edit", path="m.py", old="x", new="x")
    with pytest.raises(ToolError, match="no such file"):
        run(ws, "edit", path="nope.py", old="x", new="y")
    result = run(ws, "edit", path="m.py", old="x", new="y", all=True)
    assert result.ok and (ws.root / "m.py").read_text() == "y\ny\ny\n"


def test_edit_whitespace_hint_and_crlf(ws: ToolRunner) -> None:
    (ws.root / "w.py").write_bytes(b"def f():\r\n    return 1\r\n")
    run(ws, "edit", path="w.py", old="def f():\n    return 1", new="def f():\n    return 2")
    assert (ws.root / "w.py").read_bytes() == b"def f():\r\n    return 2\r\n"
    with pytest.raises(ToolError, match="without its leading"):
        run(ws, "edit", path="w.py", old="  return 2  \n\n\n", new="x")


def test_edit_refuses_binary_and_non_utf8(ws: ToolRunner) -> None:
    (ws.root / "b.bin").write_bytes(b"ab\x00cd")
    (ws.root / "l.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(ToolError, match="binary"):
        run(ws, "edit", path="b.bin", old="ab", new="x")
    with pytest.raises(ToolError, match="UTF-8"):
        run(ws, "edit", path="l.txt", old="caf", new="x")


# -- edit_lines ----------------------------------------------------------------------


def test_edit_lines_replace_insert_delete_append(ws: ToolRunner) -> None:
    f = ws.root / "t.txt"
    f.write_text("1\n2\n3\n4\n")
    c = call("edit_lines", path="t.txt", start=2, end=3, content="two\nthree")
    preview = ws.preview(c)
    assert preview is not None and preview.changed_lines == (2, 3)
    ws.execute(c, preview=preview)
    assert f.read_text() == "1\ntwo\nthree\n4\n"
    run(ws, "edit_lines", path="t.txt", start=2, end=1, content="inserted")  # before line 2
    assert f.read_text() == "1\ninserted\ntwo\nthree\n4\n"
    run(ws, "edit_lines", path="t.txt", start=2, end=2, content="")  # delete line 2
    assert f.read_text() == "1\ntwo\nthree\n4\n"
    run(ws, "edit_lines", path="t.txt", start=5, end=4, content="5")  # append
    assert f.read_text() == "1\ntwo\nthree\n4\n5\n"


def test_edit_lines_range_errors(ws: ToolRunner) -> None:
    (ws.root / "t.txt").write_text("1\n2\n3\n")
    with pytest.raises(ToolError, match="before start"):
        run(ws, "edit_lines", path="t.txt", start=3, end=1, content="x")
    with pytest.raises(ToolError, match="past the end"):
        run(ws, "edit_lines", path="t.txt", start=5, end=5, content="x")
    with pytest.raises(ToolError, match=r"end \(4\) is past the end"):
        run(ws, "edit_lines", path="t.txt", start=2, end=4, content="x")
    with pytest.raises(ToolError, match="no such file"):
        run(ws, "edit_lines", path="none.txt", start=1, end=1, content="x")


def test_edit_lines_keeps_missing_final_newline_and_crlf() -> None:
    assert apply_edit_lines("a\nb", 2, 2, "B", "f") == "a\nB"
    assert apply_edit_lines("a\nb", 3, 2, "c", "f") == "a\nb\nc"
    assert apply_edit_lines("a\r\nb\r\n", 1, 1, "x\ny", "f") == "x\r\ny\r\nb\r\n"
    assert apply_edit_lines("", 1, 1, "first", "f") == "first\n"


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.text(alphabet="ab \t", max_size=5), max_size=8),
    start=st.integers(1, 9),
    length=st.integers(-1, 4),
    new=st.lists(st.text(alphabet="xy", min_size=1, max_size=3), max_size=3),
)
def test_edit_lines_property(lines: list[str], start: int, length: int, new: list[str]) -> None:
    """The result is the old lines with start..end swapped for the new ones, or a ToolError."""
    text = "".join(line + "\n" for line in lines)
    end = start + length
    if end < 1:
        return
    try:
        result = apply_edit_lines(text, start, end, "\n".join(new), "f")
    except ToolError:
        n = len(lines)
        assert end < start - 1 or start > n + 1 or end > n or (n == 0 and not start == end == 1)
        return
    if not lines and start == end == 1:
        end = 0
    expected = lines[: start - 1] + new + lines[end:]
    assert split_lines(result) == [line + "\n" for line in expected]


# -- staleness -----------------------------------------------------------------------


def test_stale_proposal_detected(ws: ToolRunner) -> None:
    f = ws.root / "s.py"
    f.write_text("v = 1\n")
    c = call("edit", path="s.py", old="v = 1", new="v = 2")
    preview = ws.preview(c)
    assert preview is not None
    f.write_text("v = 1\n# someone else was here\n")
    with pytest.raises(StaleProposalError, match=r"stale proposal: s\.py changed on disk"):
        ws.execute(c, preview=preview)
    with pytest.raises(StaleProposalError):
        ws.execute(c, expected_sha256=preview.old_sha256)
    with pytest.raises(StaleProposalError):
        ws.apply_preview(preview)
    assert f.read_text() == "v = 1\n# someone else was here\n"
    fresh = ws.preview(c)
    assert fresh is not None
    assert ws.apply_preview(fresh).ok
    assert f.read_text() == "v = 2\n# someone else was here\n"


def test_stale_when_new_file_appears_or_file_vanishes(ws: ToolRunner) -> None:
    c = call("write", path="n.txt", content="mine\n")
    preview = ws.preview(c)
    assert preview is not None
    (ws.root / "n.txt").write_text("theirs\n")
    with pytest.raises(StaleProposalError):
        ws.execute(c, preview=preview)
    c2 = call("edit", path="n.txt", old="theirs", new="ours")
    p2 = ws.preview(c2)
    assert p2 is not None
    (ws.root / "n.txt").unlink()
    with pytest.raises(StaleProposalError):
        ws.apply_preview(p2)


def test_unchanged_file_applies_without_check(ws: ToolRunner) -> None:
    (ws.root / "u.txt").write_text("a\n")
    result = ws.execute(call("edit", path="u.txt", old="a", new="b"))
    assert result.ok and (ws.root / "u.txt").read_text() == "b\n"


def test_preview_is_none_for_non_file_tools(ws: ToolRunner) -> None:
    assert ws.preview(call("read", path="x")) is None
    assert ws.preview(call("bash", cmd="true")) is None
    with pytest.raises(ToolError):
        ws.preview(call("bash", cmd=""))


def test_read_only_flag() -> None:
    assert call("read", path="x").read_only
    assert call("grep", pat="x").read_only
    assert not call("bash", cmd="ls").read_only
    assert not call("write", path="x", content="").read_only


# -- glob ----------------------------------------------------------------------------


def _tree(root: Path) -> None:
    for rel in [
        "src/app.py",
        "src/util/helpers.py",
        "src/util/data.json",
        "README.md",
        ".git/config",
        ".git/objects/ab.py",
        "node_modules/lib/index.js",
        "web/main.ts",
        "web/view.tsx",
    ]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {rel}\nneedle here\n")


def test_glob_sorted_relative_and_skips_git(ws: ToolRunner) -> None:
    _tree(ws.root)
    assert run(ws, "glob", pat="*.py").output == "src/app.py\nsrc/util/helpers.py"
    assert run(ws, "glob", pat="src/*.py").output == "src/app.py"
    assert run(ws, "glob", pat="**/*.py").output == "src/app.py\nsrc/util/helpers.py"
    assert run(ws, "glob", pat="web/*.{ts,tsx}").output == "web/main.ts\nweb/view.tsx"
    assert run(ws, "glob", pat="*.py", path="src/util").output == "src/util/helpers.py"
    assert run(ws, "glob", pat="node_modules/**/*.js").output == "node_modules/lib/index.js"
    assert "No files match" in run(ws, "glob", pat="*.rs").output
    absolute = run(ws, "glob", pat=f"{ws.root}/src/*.py")
    assert absolute.output == "src/app.py"


def test_glob_errors(ws: ToolRunner) -> None:
    _tree(ws.root)
    with pytest.raises(ToolError, match=r"\.\."):
        run(ws, "glob", pat="../*")
    with pytest.raises(ToolError, match="outside"):
        run(ws, "glob", pat="/etc/*")
    with pytest.raises(ToolError, match="not a directory"):
        run(ws, "glob", pat="*", path="README.md")
    with pytest.raises(ToolError, match="no such directory"):
        run(ws, "glob", pat="*", path="nope")


# -- grep ----------------------------------------------------------------------------


def test_grep_file_line_text(ws: ToolRunner) -> None:
    _tree(ws.root)
    (ws.root / "bin.dat").write_bytes(b"needle\x00binary")
    out = run(ws, "grep", pat=r"need\w+").output.splitlines()
    assert out[0] == "README.md:2:needle here"
    assert "src/app.py:2:needle here" in out
    assert not any(line.startswith((".git", "node_modules", "bin.dat")) for line in out)
    assert out == sorted(out)
    single = run(ws, "grep", pat="^# ", path="src/app.py")
    assert single.output == "src/app.py:1:# src/app.py"
    assert "binary" in run(ws, "grep", pat="needle", path="bin.dat").output
    assert "No matches" in run(ws, "grep", pat="absent").output


def test_grep_invalid_regex_and_missing_path(ws: ToolRunner) -> None:
    with pytest.raises(ToolError, match="invalid regular expression"):
        run(ws, "grep", pat="(unclosed")
    with pytest.raises(ToolError, match="no such"):
        run(ws, "grep", pat="x", path="nope")
    with pytest.raises(ToolError, match="outside"):
        run(ws, "grep", pat="root", path="/etc")


def test_grep_output_cap(tmp_path: Path) -> None:
    ws = ToolRunner(tmp_path, Settings(sandbox="none", output_cap=500))
    (tmp_path / "many.txt").write_text("hit\n" * 1000)
    result = run(ws, "grep", pat="hit")
    assert result.truncated and len(result.output) < 700
    assert "output truncated" in result.output


def test_check_fresh_and_already_applied(ws: ToolRunner) -> None:
    f = ws.root / "c.txt"
    f.write_text("a\n")
    preview = ws.preview(call("edit", path="c.txt", old="a", new="b"))
    assert preview is not None
    ws.check_fresh(preview)  # unchanged: no error
    assert not ws.already_applied(preview)
    ws.apply_preview(preview)
    assert ws.already_applied(preview)
    with pytest.raises(StaleProposalError, match=r"stale proposal: c\.txt"):
        ws.check_fresh(preview)


def test_sandbox_note_only_for_bash(ws: ToolRunner) -> None:
    assert ws.sandbox_note(call("read", path="x")) is None
    note = ws.sandbox_note(call("bash", cmd="ls"))
    assert note is not None and "WITHOUT a sandbox" in note  # the fixture runs sandbox="none"


def test_fifo_is_refused_not_blocking(ws: ToolRunner) -> None:
    os.mkfifo(ws.root / "pipe")
    with pytest.raises(ToolError, match="not a regular file"):
        run(ws, "read", path="pipe")
    with pytest.raises(ToolError, match="not a regular file"):
        run(ws, "write", path="pipe", content="x")
    assert "No matches" in run(ws, "grep", pat="x").output


# -- done ----------------------------------------------------------------------------


def test_done_changes_nothing_and_checks_its_summary(ws: ToolRunner) -> None:
    (ws.root / "f.py").write_text("x = 1\n")
    finish = call("done", summary="Nothing left to change.")
    assert ws.preview(finish) is None
    assert ws.execute(finish) == ToolResult(ok=True, output="task finished")
    assert [p.name for p in ws.root.iterdir()] == ["f.py"]
    for summary in ("", "two\nparagraphs", "x" * 301):
        with pytest.raises(ToolError, match="invalid arguments for done"):
            ws.execute(call("done", summary=summary))


@pytest.mark.parametrize("name", ["a\u202etxt.exe", "a\u200b.py", "a\u2066b.py", "a\u00adb.py"])
def test_write_refuses_a_path_with_hidden_characters(ws: ToolRunner, name: str) -> None:
    with pytest.raises(ToolError, match="U\\+") as err:
        ws.preview(call("write", path=f"src/{name}", content="x\n"))
    assert name not in str(err.value)  # the message itself shows the name escaped
    assert not (ws.root / "src").exists()


def test_the_diff_header_shows_a_confusable_path_escaped(ws: ToolRunner) -> None:
    preview = ws.preview(call("write", path="p\u0430ypal.py", content="x\n"))
    assert preview is not None and preview.path == "p\u0430ypal.py"  # the file's real name
    assert "+++ b/p\\u0430ypal.py" in preview.diff
    assert "\u0430" not in preview.diff
