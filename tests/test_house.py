"""House rules for `continual_lsp/` and `server/` (issue 18): no function over 80 lines, and
no module over 500 lines unless its docstring says why ("... 500 lines ...")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("continual_lsp", "server")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def long_functions(tree: ast.Module) -> list[str]:
    return [
        f"{node.name} (line {node.lineno}, {node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def unexplained_length(source: str, tree: ast.Module) -> bool:
    too_long = len(source.splitlines()) > MAX_MODULE_LINES
    return too_long and f"{MAX_MODULE_LINES} lines" not in (ast.get_docstring(tree) or "")


def test_the_walk_finds_both_packages() -> None:
    found = {p.relative_to(ROOT).parts[0] for p in modules()}
    assert found == set(PACKAGES)


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_and_functions_within_the_house_limits(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    assert not long_functions(tree), f"functions over {MAX_FUNCTION_LINES} lines"
    assert not unexplained_length(source, tree), (
        f"over {MAX_MODULE_LINES} lines without a docstring saying why"
    )


def test_the_rules_catch_what_they_name() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    long_def = f"def f():\n{body}\n"
    assert long_functions(ast.parse(long_def)) == [f"f (line 1, {MAX_FUNCTION_LINES + 1} lines)"]
    padding = "\n" * (MAX_MODULE_LINES + 1)
    assert unexplained_length(f'"""Short."""{padding}', ast.parse(f'"""Short."""{padding}'))
    explained = f'"""Over {MAX_MODULE_LINES} lines on purpose: one argument."""{padding}'
    assert not unexplained_length(explained, ast.parse(explained))
