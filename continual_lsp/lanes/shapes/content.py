"""Rule shapes of what added lines may or must contain: styles, code smells, markup,
required text, and which parts of a codebase may import which.
"""

from __future__ import annotations

import re

from continual_lsp.lanes.guards.spec import CommitMessageRule, ContentRule
from continual_lsp.lanes.shapes.kit import (
    EMOJI,
    JS,
    MARKUP,
    NEG,
    Shaped,
    bash_probe,
    example_path,
    forbids,
    globs_of,
    import_re,
    languages_of,
    write_pair,
)

# -- content on added lines ------------------------------------------------------------------


def content_shapes(text: str) -> list[Shaped]:
    t = text
    return [
        *_style_content_shapes(t),
        *_code_content_shapes(t),
        *_markup_content_shapes(t),
        *_required_text(t),
        *_import_boundaries(t),
        *allowed_import_shapes(t),
    ]


PY_DEF = r"^[ \t]*(?:async\s+)?def\s+"
PY_DOCSTRING_MISSING = (
    PY_DEF + r"(?!_)\w+\([^\n]*\)(?:\s*->[^\n]*)?:[ \t]*\n(?![ \t]*[rRbBuU]?(?:\"\"\"|'''))"
)
# The fixed content rules the shapes read, by name: (pattern, files, a file with the
# pattern, one without, their path). One table, so every such self-check reads alike.
DENIALS: dict[str, tuple[str, list[str], str, str, str]] = {
    "default_export": (r"^\s*export\s+default\b", JS, "export default function f() {}\n", "export function f() {}\n", "src/example.ts"),
    "tabs": (r"^\t+", [], "def f():\n\treturn 1\n", "def f():\n    return 1\n", "src/a.py"),
    "inline_style": (r"\bstyle\s*=\s*[\"'{]", MARKUP, '<div style="color: red">x</div>\n', '<div class="warn">x</div>\n', "src/example.html"),
    "var": (r"^\s*var\s", JS, "var x = 1;\n", "const x = 1;\n", "src/example.js"),
    "debugger": (r"^\s*debugger;?\s*$", JS, "debugger;\n", "const x = 1;\n", "src/example.js"),
    "stdlib_logging": (r"^\s*(import logging\b|from logging import)", ["*.py"], "import logging\n", "import structlog\n", "src/example.py"),
    "template_placeholder": (r"\{\{\s*[A-Za-z_]\w*\s*\}\}", [], "Hello {{NAME}}\n", "Hello Ada\n", "docs/a.md"),
    "star_import": (r"^\s*from\s+\S+\s+import\s+\*", ["*.py"], "from os import *\n", "from os import path\n", "src/example.py"),
    "then_chain": (r"\.then\(", JS, "f().then(g);\n", "await f();\n", "src/example.ts"),
    "single_quoted_attribute": (r"\s[\w:-]+='", MARKUP, "<a href='/x'>x</a>\n", '<a href="/x">x</a>\n', "a.html"),
    "missing_docstring": (PY_DOCSTRING_MISSING, ["*.py"], "def mean(xs):\n    return sum(xs) / len(xs)\n", 'def mean(xs):\n    """The arithmetic mean."""\n    return sum(xs) / len(xs)\n', "src/example.py"),
    "missing_jsdoc": (r"(?<!\*/\n)^[ \t]*(?:export\s+)?(?:default\s+)?(?:async\s+)?function\b", JS, "export function f(a) {\n  return a;\n}\n", "/** Returns a. */\nexport function f(a) {\n  return a;\n}\n", "src/example.js"),
    "missing_type_hints": (PY_DEF + r"\w+\([^\n]*\)\s*:", ["*.py"], "def mean(xs):\n    return 0.0\n", "def mean(xs: list[float]) -> float:\n    return 0.0\n", "src/example.py"),
    "class_component": (r"\bclass\s+\w+\s+extends\s+(?:React\.)?(?:Pure)?Component\b", JS, "class App extends React.Component {}\n", "function App() {\n  return null;\n}\n", "src/App.jsx"),
    "arrow_parens": (r"(?<![\w$.])\(\s*[A-Za-z_$][\w$]*\s*\)\s*=>", JS, "const f = (x) => x;\n", "const f = x => x;\n", "src/example.js"),
    "arrow_bare_parameter": (r"(?:^|[=(,:?]\s*)(?:async\s+)?[A-Za-z_$][\w$]*\s*=>", JS, "const f = x => x;\n", "const f = (x) => x;\n", "src/example.js"),
    "force_unwrap": (r"[\w)\]]!(?=[.\s),;\]]|$)", ["*.swift"], "let n = name!.count\n", "let n = name?.count ?? 0\n", "Sources/Example.swift"),
    "private_without_underscore": (r"\bprivate\s+(?:(?:readonly|static|final)\s+)*(?:[\w<>\[\],?]+\s+)?(?!_)[A-Za-z]\w*\s*[;=:]", ["*.ts", "*.tsx", "*.java", "*.cs", "*.kt"], "class A {\n  private count: number = 0;\n}\n", "class A {\n  private _count: number = 0;\n}\n", "src/example.ts"),
    "interface": (r"^\s*(?:export\s+)?interface\s+\w+", ["*.ts", "*.tsx"], "interface A {\n  x: number;\n}\n", "type A = {\n  x: number;\n};\n", "src/example.ts"),
    "type_alias": (r"^\s*(?:export\s+)?type\s+\w+(?:<[^>\n]*>)?\s*=\s*\{", ["*.ts", "*.tsx"], "type A = {\n  x: number;\n};\n", "interface A {\n  x: number;\n}\n", "src/example.ts"),
}  # fmt: skip


def deny(out: list[Shaped], pattern: str, globs: list[str], bad: str, good: str, path: str) -> None:
    rule = ContentRule(pattern=pattern, path_globs=globs)
    out.append(write_pair(rule, path, bad, good))


def _style_content_shapes(t: str) -> list[Shaped]:
    """Named exports, emoji, tabs, inline styles, `var`."""
    out: list[Shaped] = []
    if re.search(r"\bnamed exports?\b", t, re.I) or re.search(
        NEG + r"[^.]*\bdefault exports?", t, re.I
    ):
        deny(out, *DENIALS["default_export"])
    commits_only = re.search(r"\bcommit", t, re.I) and not re.search(
        r"\b(code|comments?|files?|docs?|documentation|source|strings?|anywhere|everywhere|"
        r"output|ui|logs?|readme|markdown)\b",
        t,
        re.I,
    )
    if forbids(t, r"[^.]*\b(emojis?|emoji)\b") and not commits_only:
        out.append(
            write_pair(ContentRule(pattern=EMOJI), "src/a.py", "x = 1  # \u2705\n", "x = 1\n")
        )
    if forbids(t, r"[^.]*\b(emojis?|emoji)\b") and re.search(r"\bcommit", t, re.I):
        out.append(
            Shaped(
                CommitMessageRule(pattern=EMOJI),
                bash_probe("git commit -m 'fix: a \u2728'"),
                bash_probe("git commit -m 'fix: a'"),
            )
        )
    if re.search(
        NEG + r"[^.]*\btabs?\b|\bspaces?,? (?:not|no|never) tabs?\b|\b\d[- ]space indent", t, re.I
    ):
        deny(out, *DENIALS["tabs"])
    if forbids(t, r"[^.]*\binline[- ]styles?\b"):
        deny(out, *DENIALS["inline_style"])
    if forbids(t, r"[^.]*\bvar\b") and re.search(r"\b(const|let|var)\b", t):
        deny(out, *DENIALS["var"])
    return out


def _code_content_shapes(t: str) -> list[Shaped]:
    """Debug output, stdlib logging, placeholders, star imports, `.then()`."""
    out: list[Shaped] = []
    if re.search(
        NEG + r"[^.]*(?:\bprint\(\)|`print`|\bprint\s+statements?\b)", t, re.I
    ) or re.search(r"\b(logging|logger)\b[^.]*\binstead of\s+`?print", t, re.I):
        langs = languages_of(t) or ["*.py"]
        deny(
            out,
            r"^\s*print\(",
            langs,
            "print('debug')\n",
            "log.info('debug')\n",
            example_path(langs, "src/example.py"),
        )
    if forbids(t, r"[^.]*\bdebugger\b"):
        deny(out, *DENIALS["debugger"])
    if re.search(r"\bimport\s+logging\b|\bstdlib\s+`?logging", t, re.I) and re.search(
        r"\bNOT\b|\bnot\b|never", t
    ):
        deny(out, *DENIALS["stdlib_logging"])
    if re.search(r"\bunresolved placeholders?\b", t, re.I):
        deny(out, *DENIALS["template_placeholder"])
    if re.search(r"\bwildcard imports?\b|\bstar imports?\b|\bexplicit imports?\b", t, re.I):
        deny(out, *DENIALS["star_import"])
    if re.search(r"`\.then\(\)`|\braw\s+`?\.then\b", t, re.I) and re.search(NEG, t, re.I):
        deny(out, *DENIALS["then_chain"])
    return out


def _markup_content_shapes(t: str) -> list[Shaped]:
    """Banned tags and attribute quoting."""
    out: list[Shaped] = []
    # "don't use raw `<img>` tags", "no inline `<script>` tags in `index.html`".
    for m in re.finditer(NEG + r"[^.]*?(?P<inline>\binline\s+)?`<(?P<tag>[a-z][\w-]*)>`", t, re.I):
        tag = m.group("tag").lower()
        inline = r"(?![^>]*\bsrc\s*=)" if m.group("inline") and tag == "script" else ""
        named = [
            g for g in globs_of(t) if g.rsplit(".", 1)[-1] in ("html", "twig", "vue", "tsx", "jsx")
        ]
        globs = named or MARKUP
        path = named[0] if named else "src/example.html"
        deny(out, rf"<{tag}\b{inline}", globs, f"<{tag}>x</{tag}>\n", "<div>x</div>\n", path)
    if re.search(r"\bdouble quotes? for (?:html )?attributes\b", t, re.I):
        deny(out, *DENIALS["single_quoted_attribute"])
    return out


def _required_text(t: str) -> list[Shaped]:
    """ "Every (new|modified) file must include/start with "X"" -> required content."""
    m = re.search(
        r"\b(?:every|each|all)\s+(?:new\s+|modified\s+|source\s+)*(?:files?|modules?)\s+"
        r"(?:must|should)\s+(?:include|contain|start with|begin with|have)\b[^\"`“]*[\"`“]([^\"`”]{3,})[\"`”]",
        t,
        re.I,
    )
    if not m:
        return []
    needle = m.group(1).strip()
    rule = ContentRule(pattern=re.escape(needle), required=True)
    return [write_pair(rule, "src/a.py", "x = 1\n", f"# {needle}\nx = 1\n")]


_PART = r"(?:code|files?|layers?|packages?|modules?|folders?|director(?:y|ies)|apps?|crates?)"
# Words a loose reading could take for a module name.
_NOT_MODULES = frozenset(
    {"the", "a", "an", "any", "it", "them", "anything", "other", "another", "each", "this",
     "that", "code", "files", "from", "something", "everything", "directly"}
)  # fmt: skip


def _import_boundaries(t: str) -> list[Shaped]:
    """ "never import `X` (directly)( in `P`)", "`A/` never imports `B/`"."""
    out: list[Shaped] = []
    spans: list[tuple[int, int]] = []
    for m in re.finditer(
        r"(?:`(?P<src>[\w./-]+)`(?:\s+" + _PART + r")?"
        r"|(?:^|\bthe\s+)(?P<srcw>[a-z][\w-]*)(?:\s+" + _PART + r")?"
        r"|(?P<srcw2>\b[a-z][\w-]*)\s+" + _PART + r")\s+(?:must\s+|should\s+)?"
        r"(?:never|not|must not|does not|do not|cannot|may not)\s+"
        r"(?:imports?|depends?\s+on|uses?)\s+(?:from\s+)?(?:the\s+)?"
        r"(?:`(?P<dst>[\w./@-]+)`|(?P<dstw>[a-z][\w-]*)(?:\s+" + _PART + r")?\b)",
        t,
        re.I,
    ):
        src = m.group("src") or (m.group("srcw") or m.group("srcw2") or "").lower()
        dst = m.group("dst") or (m.group("dstw") or "").lower()
        if not src or dst in _NOT_MODULES or src in _NOT_MODULES:
            continue
        spans.append(m.span())
        globs = [f"**/{src.strip('/')}/**"]
        rule = ContentRule(pattern=import_re(dst), path_globs=globs)
        path = src.rstrip("/") + "/a.ts"
        out.append(
            write_pair(
                rule, path, f"import {{ x }} from '../{dst}/x';\n", "import { x } from './x';\n"
            )
        )
    for m in re.finditer(
        NEG + r"\s+import\s+(?:from\s+)?(?:`(?P<mods>[^`]+)`|(?P<word>\w+))"
        r"(?:\s+or\s+`(?P<mods2>[^`]+)`)?"
        r"(?:\s+directly)?(?:\s+(?:in|from|inside|within)\s+(?:the\s+|any\s+)?(?P<where>[\w`./-]+)"
        r"(?P<part>\s+" + _PART + r")?)?",
        t,
        re.I,
    ):
        if any(a <= m.start() < b for a, b in spans):
            continue  # the folder-to-folder form above already read this clause
        mods = [x for x in (m.group("mods"), m.group("mods2"), m.group("word")) if x]
        mods = [x for x in mods if re.fullmatch(r"[\w./@-]+", x) and x.lower() not in _NOT_MODULES]
        if not mods:
            continue
        where = (m.group("where") or "").strip("`")
        # "in `src/ui/`", "in server code", "in tests": a folder; "in production": not one.
        folder = "/" in where or m.group("part") or re.fullmatch(r"[a-z]+s", where)
        globs = (
            [f"**/{where.strip('/')}/**"] if folder and where.lower() not in _NOT_MODULES else []
        )
        owner = [g for g in globs_of(t) if g not in globs and "." in g.rsplit("/", 1)[-1]]
        # A folder's own files import from it: "never import from `internal/`" is about
        # everyone else.
        owner += [f"**/{x.strip('/')}/**" for x in mods if x.endswith("/")]
        pattern = "|".join(f"(?:{import_re(x)})" for x in mods)
        rule = ContentRule(pattern=pattern, path_globs=globs, exclude_globs=owner)
        path = f"src/{where.strip('/')}/a.py" if globs else "src/a.py"
        out.append(write_pair(rule, path, f"import {mods[0].replace('/', '.')}\n", "import json\n"))
    return out


def allowed_import_shapes(t: str) -> list[Shaped]:
    """ "`api/` imports application + contracts only", "`ui/` may only import from `core/`":
    in the folder, a relative or `@/` import of any other top-level part is blocked."""
    m = re.search(
        r"`(?P<src>[\w-]+)/?`(?:\s+" + _PART + r")?\s+(?:(?:may|can|should|must)\s+)?(?:only\s+)?"
        r"imports?\s+(?:from\s+)?"
        r"(?P<allowed>[`\w/ +,&-]+?)(?:\s+only\b|[.;]|$)",
        t,
        re.I,
    )
    if not m or not re.search(r"\bonly\b", t, re.I):
        return []
    allowed = [
        w.strip("`/").lower()
        for w in re.split(r"\s*(?:\+|,|&|\band\b|\bor\b)\s*", m.group("allowed"))
        if re.fullmatch(r"`?[\w-]+/?`?", w.strip())
    ]
    if not allowed:
        return []
    src = m.group("src").lower()
    others = r"(?!(?:" + "|".join(map(re.escape, [src, *allowed])) + r")\b)[\w-]+"
    pattern = (
        rf"^\s*(?:import\b[^'\"\n]*\bfrom\s+|import\s+|export\b[^'\"\n]*\bfrom\s+)['\"]"
        rf"(?:(?:\.\./)+|@/){others}|^\s*from\s+\.\.+{others}"
    )
    rule = ContentRule(pattern=pattern, path_globs=[f"**/{src}/**"])
    path = f"src/{src}/a.ts"
    return [
        write_pair(
            rule,
            path,
            "import { x } from '../somewhere_else/x';\n",
            f"import {{ x }} from '../{allowed[0]}/x';\n",
        )
    ]
