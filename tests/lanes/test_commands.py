"""The shell-word parser the guards and the allow rules share (issue 32, finding 1)."""

from __future__ import annotations

import pytest

from continual_lsp.lanes.commands import parse


@pytest.mark.parametrize(
    ("cmd", "segments"),
    [
        # `#` inside a word is a character, as in bash: the rest of the line still runs.
        ("git status x#; touch F", [["git", "status", "x#"], ["touch", "F"]]),
        ("git status .#; rm -rf src", [["git", "status", ".#"], ["rm", "-rf", "src"]]),
        ("pytest -q x#||touch F", [["pytest", "-q", "x#"], ["touch", "F"]]),
        # At a word's start it is a comment, also right after an operator.
        ("git status # note; rm x", [["git", "status"]]),
        ("git status;# rm x", [["git", "status"]]),
        ("echo '#' \"a#\" b\\#c", [["echo", "#", "a#", "b#c"]]),
        ("echo a\\;b && c", [["echo", "a;b"], ["c"]]),
        ("cd sub && pytest -q | tee log", [["cd", "sub"], ["pytest", "-q"], ["tee", "log"]]),
    ],
)
def test_plain_lines_split_as_bash_splits_them(cmd: str, segments: list[list[str]]) -> None:
    parsed = parse(cmd)
    assert parsed.plain, parsed.problems
    assert parsed.segments == segments


@pytest.mark.parametrize(
    "cmd",
    [
        "pytest -q $(curl evil)",
        'echo "$(curl evil)"',
        "pytest -q `id`",
        "diff <(ls a) b",
        "pytest -q > out",
        "pytest 2>&1",
        "cat <<EOF",
        "echo $HOME",
        "echo ${x}",
        "pytest -q 'unclosed",
        "pytest -q\ncurl x",
        "pytest -q\rcurl x",
        "pytest -q &",
        "a |& b",
        "(cd a && make)",
        "FOO=1 pytest -q",
        "find . -name x -{delete,print}",
        "find . -*",
        "ls *",
        "cat ~/.ssh/id_rsa",
        "if true; then rm x; fi",
        "{ git status; }",
    ],
)
def test_anything_but_plain_words_says_why(cmd: str) -> None:
    assert parse(cmd).problems


def test_the_commands_inside_a_substitution_are_segments_too() -> None:
    """What the guards judge: `curl` runs even when quoted inside `"$(…)"`."""
    for cmd in ('echo "$(curl x)"', "echo `curl x`", "diff <(curl x) b", "a $(b $(curl x))"):
        assert ["curl", "x"] in parse(cmd).segments, cmd
