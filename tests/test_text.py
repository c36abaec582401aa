"""Lines, diffs and clipping as every tool and the agent count them."""

from __future__ import annotations

from continual_lsp.text import changed_lines, clip, shown_path, split_lines, unified_diff


def test_only_newline_ends_a_line() -> None:
    # str.splitlines would make three lines of this and misnumber every line after it.
    assert split_lines("a\x0cb\u2028c\nd") == ["a\x0cb\u2028c\n", "d"]
    assert split_lines("") == []
    assert split_lines("x\n") == ["x\n"]
    assert split_lines("x\r\ny") == ["x\r\n", "y"]


def test_the_diff_counts_the_lines_the_tools_count() -> None:
    old = "one\x0ctwo\nthree\n"
    new = "one\x0ctwo\nTHREE\n"
    diff = unified_diff(old, new, "a/f", "b/f")
    assert "@@ -1,2 +1,2 @@" in diff  # two lines, not three
    assert "-three\n+THREE\n" in diff


def test_a_last_line_without_newline_is_marked() -> None:
    diff = unified_diff('{"a": 1}', '{"a": 2}', "a/call.json", "b/call.json")
    assert diff.endswith(
        '-{"a": 1}\n\\ No newline at end of file\n+{"a": 2}\n\\ No newline at end of file\n'
    )
    assert unified_diff("same\n", "same\n", "a", "b") == ""


def test_clip() -> None:
    assert clip("short", 10) == "short"
    assert clip("abcdefghij", 4) == "abcd…"
    assert clip("abcdefghij", 4, say_cut=True) == "abcd … (6 chars cut)"


def test_changed_lines_leave_out_headers_and_the_no_newline_marker() -> None:
    diff = unified_diff("a\n-x\n", "a\n+y", "a/f", "b/f")
    assert changed_lines(diff) == (["-x"], ["+y"])


def test_shown_path_escapes_hidden_characters_and_mixed_script_words() -> None:
    """Issue 32 finding 8: `src/a\\u202etxt.exe` reached the reviewer as `src/aexe.txt`."""
    assert shown_path("src/a\u202etxt.exe") == "src/a\\u202etxt.exe"
    assert shown_path("a\u200bb\u00a0c\x1bd") == "a\\u200bb\\u00a0c\\u001bd"
    assert shown_path("src/p\u0430ypal.py") == "src/p\\u0430ypal.py"  # Cyrillic а
    assert shown_path("\u0440\u200bay.py") == "\\u0440\\u200bay.py"  # split by a hidden one
    assert shown_path("docs/\u0444\u0430\u0439\u043b.txt") == "docs/\u0444\u0430\u0439\u043b.txt"
    assert shown_path("caf\u00e9/na\u00efve.md") == "caf\u00e9/na\u00efve.md"  # all Latin
    assert shown_path("a\\u202e") == "a\\\\u202e"  # a literal escape cannot pass for one
    assert shown_path("src/calc/ops.py") == "src/calc/ops.py"
