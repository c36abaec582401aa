"""The curriculum's exercises: the smallest edit, and every change plan does the fix."""

from __future__ import annotations

import random
from pathlib import Path

from continual_lsp.curriculum.episodes import TOOL_SETTINGS, execute, write_workspace
from continual_lsp.curriculum.exercises import Builder, edit_span, load_vocab
from continual_lsp.tools.runner import ToolRunner


def test_edit_span_is_the_words_that_change() -> None:
    go = "package x\n\nfunc f(a, b int) int {\n\treturn count * size\n}\n"
    # Not the tab: a small model drops it when it copies the line.
    assert edit_span(go, "\treturn count * size", "\treturn count + size") == (
        "count * size",
        "count + size",
    )
    doc = "# T\n\nAsk before you neccessary the calendar.\n"
    line = "Ask before you neccessary the calendar."
    assert edit_span(doc, line, line.replace("neccessary", "necessary")) == (
        "neccessary",
        "necessary",
    )
    # Short spans grow by a word, left first, until they are long enough and unique.
    assert edit_span("a\nQUEUE_DEPTH = 30\n", "QUEUE_DEPTH = 30", "QUEUE_DEPTH = 5") == (
        "QUEUE_DEPTH = 30",
        "QUEUE_DEPTH = 5",
    )
    loop = "    for i in range(1, n):"
    assert edit_span(f"x\n{loop}\n", loop, "    for i in range(1, n + 1):") == (
        "range(1, n):",
        "range(1, n + 1):",
    )
    # The whole line is in the file twice: no edit can name it.
    assert edit_span("x = 1\nx = 1\n", "x = 1", "x = 2") is None
    assert edit_span("a\nx = 1\n", "x = 1", "x = 2") == ("x = 1", "x = 2")
    # Indentation that changes is not a span of words.
    assert edit_span("a\n  x = 1\n", "  x = 1", "    x = 1") is None


def test_every_change_in_the_plan_makes_the_fix(tmp_path: Path) -> None:
    """The plan's change (edit or edit_lines), run through the real tools, leaves the
    target exactly as the fixed file: 300 seeded exercises of every one-line kind."""
    builder = Builder(load_vocab(), random.Random(5))
    tools = set()
    for i in range(300):
        s = builder.exercise(Builder.KINDS[i % len(Builder.KINDS)])
        if "n" not in s.facts:
            continue
        root = tmp_path / str(i)
        write_workspace(root, s.files)
        change = s.plan[s.change]
        tools.add(change.tool)
        assert execute(ToolRunner(root, TOOL_SETTINGS), change).ok, change
        lines = s.files[s.target].split("\n")
        n = s.facts["n"]
        lines[n - 1 : n] = s.facts["new"].split("\n") if s.facts["new"] else []
        assert (root / s.target).read_text(encoding="utf-8") == "\n".join(lines), change
    assert tools == {"edit", "edit_lines"}
