"""An edit whose `old` is not in the file, narrowed to the part that differs
(`agent.narrowing`, tried by `calls.repaired`)."""

from __future__ import annotations

from pathlib import Path

from continual_lsp.agent import narrowing
from continual_lsp.agent.calls import preview, repaired
from continual_lsp.config import Settings
from continual_lsp.tools.base import ToolCall
from continual_lsp.tools.runner import ToolRunner


def _edit(old: str, new: str, **more: object) -> ToolCall:
    return ToolCall(tool="edit", arguments={"path": "app/run.py", "old": old, "new": new, **more})


def _pairs(call: ToolCall) -> list[tuple[str, str]]:
    return [(v.arguments["old"], v.arguments["new"]) for v in narrowing.variants(call)]


def test_the_span_that_differs_widened_to_a_token_then_to_a_word() -> None:
    assert _pairs(_edit("data/report.txt", "data/summary.txt")) == [
        ("report.txt", "summary.txt"),
        ("report", "summary"),
    ]
    assert _pairs(_edit("return totl", "return total")) == [("totl", "total")]


def test_nothing_narrower_than_three_characters_nor_for_all_or_other_tools() -> None:
    assert _pairs(_edit("return a - b", "return a + b")) == []  # a lone operator
    assert _pairs(_edit("return totl", "return total", all=True)) == []
    lines = ToolCall(
        tool="edit_lines", arguments={"path": "a", "start": 1, "end": 1, "content": ""}
    )
    assert narrowing.variants(lines) == []


def test_the_first_variant_that_occurs_once_is_shown_with_its_note(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app/run.py").write_text(
        'from pathlib import Path\n\nDATA = Path("data") / "report.txt"\n'
    )
    tools = ToolRunner(tmp_path, Settings(enable_training=False))
    call = _edit("data/report.txt", "data/summary.txt")
    shown, error = preview(tools, call)
    assert shown is None and error is not None
    fixed = repaired(tools, call, shown, error)
    assert fixed is not None
    variant, fixed_preview, note = fixed
    assert variant.arguments["old"] == "report.txt" and note == narrowing.NOTE
    assert fixed_preview.new_content.endswith('/ "summary.txt"\n')
    # a narrowed `old` that occurs twice says nothing of where the change goes
    (tmp_path / "app/run.py").write_text("y = totl\nz = totl\n")
    call = _edit("x = totl + 1", "x = total + 1")
    assert _pairs(call) == [("totl", "total")]
    shown, error = preview(tools, call)
    assert error is not None and repaired(tools, call, shown, error) is None
