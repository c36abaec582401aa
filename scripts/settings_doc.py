"""Write docs/configuration.md from `Settings` in continual_lsp/config.py.

    python scripts/settings_doc.py           rewrite docs/configuration.md
    python scripts/settings_doc.py --check   exit 1 when the file is not what it would write

The meaning of each setting is the comment above its field (and any comment on the same
line), so the explanation lives once, beside the code that reads it; a short lowercase
comment after a blank line ("# policy") heads a group. A test runs `--check`, so the page
cannot drift from the code.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

from continual_lsp.config import Settings

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "continual_lsp" / "config.py"
TARGET = ROOT / "docs" / "configuration.md"

HEADER = """# Configuration

Generated from `continual_lsp/config.py` by `python scripts/settings_doc.py`; edit the
comments there, not this page (`tests/test_config.py` checks they agree).

Settings come from defaults < a TOML file (`--config`) < `CONTINUAL_LSP_<NAME>`
environment variables < command-line flags. A list is comma-separated in an environment
variable; a map (`vllm_path_map`) is `LOCAL=REMOTE` pairs.
"""


def _comments(source: str) -> dict[int, str]:
    """Line number -> comment text, for every comment in `source`."""
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string.lstrip("#").strip()
    return found


def _is_heading(text: str) -> bool:
    return bool(text) and text[0].islower() and not text.endswith(".")


def _fields(source: str) -> list[tuple[str | None, str, str]]:
    """(group heading, field name, meaning) in the order of the class body."""
    lines = source.splitlines()
    comments = _comments(source)
    cls = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef) and node.name == "Settings"
    )
    rows: list[tuple[str | None, str, str]] = []
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        heading = None
        line = node.lineno - 1
        while line >= 1 and line in comments and lines[line - 1].lstrip().startswith("#"):
            text = comments[line]
            blank_before = line == 1 or not lines[line - 2].strip()
            if blank_before and _is_heading(text):
                heading = text
                break
            above.insert(0, text)
            line -= 1
        trailing = [comments[n] for n in range(node.lineno, node.end_lineno + 1) if n in comments]
        meaning = " ".join(above + trailing).replace("|", "\\|")
        rows.append((heading, node.target.id, meaning))
    return rows


def _default(name: str) -> str:
    field = Settings.model_fields[name]
    value = field.get_default(call_default_factory=True)
    return "—" if value is None else f"`{value!r}`".replace("|", "\\|")


def render() -> str:
    out = [HEADER]
    for heading, name, meaning in _fields(SOURCE.read_text(encoding="utf-8")):
        if heading is not None:
            out.append(f"\n## {heading[0].upper()}{heading[1:]}\n")
            out.append("| setting | default | meaning |\n|---|---|---|")
        out.append(f"| `{name}` | {_default(name)} | {meaning} |")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET} is out of date: run python scripts/settings_doc.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
