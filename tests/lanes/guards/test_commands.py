"""The shell-word parser the guards and the allow rules share (issue 32, finding 1)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from continual_lsp.lanes.guards.commands import parse


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


BASH_LINES = [
    "git status x#; touch F",
    "pytest -q x#||touch F",
    "git status # note; rm x",
    "echo '#' \"a#\" b\\#c \"q\\\"uote\" 'it''s'",
    "echo a\\;b && touch 'x y' \"\" z",
    "cd sub && pytest -q -k 'a or b' | tee log",
]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("cmd", BASH_LINES)
def test_plain_words_are_the_words_bash_runs(cmd: str, tmp_path: Path) -> None:
    """Each command name becomes a function that records its words (`pytest` fails, so
    `||` runs its right side): what bash ran is what `parse` said it would. Each record
    is one append: the two sides of a pipe run at once, and two writes per record
    interleaved (the `| tee` case failed now and then)."""
    out = tmp_path / "ran"
    status = {"git": 0, "touch": 0, "pytest": 1, "rm": 0, "echo": 0, "cd": 0, "tee": 0}
    record = "; ".join(
        f'{n}() {{ local r; r=$(printf \'%s\\037\' {n} "$@"); printf \'%s\\n\' "$r" >> "$OUT"; '
        f"return {s}; }}"
        for n, s in status.items()
    )
    env = {"OUT": str(out), "PATH": "/usr/bin:/bin"}
    subprocess.run(["bash", "-c", f"{record}\n{cmd}"], env=env, cwd=tmp_path, check=True)
    ran = [line.split("\x1f")[:-1] for line in out.read_text().splitlines()]
    parsed = parse(cmd)
    assert parsed.plain
    assert sorted(ran) == sorted(parsed.segments)
