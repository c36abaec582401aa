"""The demo's scripted reviewer judges a proposal by its diff."""

from continual_lsp.demo import BUG_LINE, FIX, fixes_the_bug, preference


def _diff(removed: list[str], added: list[str]) -> str:
    body = [f"-{x}" for x in removed] + [f"+{x}" for x in added]
    return "\n".join(["--- a/src/calc/ops.py", "+++ b/src/calc/ops.py", "@@ -7 +7 @@", *body])


def test_only_the_exact_fix_counts() -> None:
    assert fixes_the_bug({"diff": _diff([BUG_LINE], [FIX["content"]])})
    assert not fixes_the_bug({"diff": _diff(["def mean(values):"], ["def mean(values):  "])})
    assert not fixes_the_bug({"diff": _diff([BUG_LINE], [FIX["content"], "print(1)"])})
    assert not fixes_the_bug({"tool": "write"})


def test_a_fix_made_at_once_is_asked_for_the_other_line_tool() -> None:
    """A fix made with edit is not denied with "use edit, not edit_lines"."""
    text, wanted = preference("edit")
    assert wanted == "edit_lines" and text.startswith("Use edit_lines")
    for tool in ("edit_lines", "write"):
        text, wanted = preference(tool)
        assert wanted == "edit" and "not edit_lines" in text
