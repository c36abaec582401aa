"""The demo's scripted reviewer judges a proposal by its diff."""

from continual_lsp.demo import BUG_LINE, FIX, fixes_the_bug


def _diff(removed: list[str], added: list[str]) -> str:
    body = [f"-{x}" for x in removed] + [f"+{x}" for x in added]
    return "\n".join(["--- a/src/calc/ops.py", "+++ b/src/calc/ops.py", "@@ -7 +7 @@", *body])


def test_only_the_exact_fix_counts() -> None:
    assert fixes_the_bug({"diff": _diff([BUG_LINE], [FIX["content"]])})
    assert not fixes_the_bug({"diff": _diff(["def mean(values):"], ["def mean(values):  "])})
    assert not fixes_the_bug({"diff": _diff([BUG_LINE], [FIX["content"], "print(1)"])})
    assert not fixes_the_bug({"tool": "write"})
