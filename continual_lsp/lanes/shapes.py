"""Rule shapes the guard compiler knows, each with the self-check that proves its guard.

A shape reads one general form of rule ("no default exports", "after changing X run Y",
"commit messages follow Conventional Commits", "`client/` never imports `server/`") and
returns the declarative rule together with two situations it synthesises: one that
violates the rule and one that complies. `compile.compile_guard` keeps a rule only when
its guard fires on the first and lets the second through, so a CODE decision always
names a guard that has been seen to work.

The vocabulary is the general vocabulary of software work (languages, file types,
formatters, git), never a project's own names.

Longer than 500 lines on purpose: the shapes are one ordered table the compiler walks (the
first shape that reads a rule wins), each a few lines of pattern and its two synthesised
calls; split by kind, the order that decides between them would be scattered.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from continual_lsp.lanes.features import FILE_TYPES, KNOWN_CLI, KNOWN_FILES, PATHISH, is_commandish
from continual_lsp.lanes.guards import (
    SEGMENT_START,
    CommandRule,
    CommitMessageRule,
    ContentRule,
    Guard,
    GuardSpec,
    NamingRule,
    PathRule,
    ReadFirstRule,
    Rule,
    SequenceRule,
)
from continual_lsp.tools.base import Preview, ToolCall


@dataclass
class Probe:
    """A call and the calls before it: what a shape's rule is tried on to see it fire or pass."""

    call: ToolCall
    history: list[ToolCall] = field(default_factory=list)
    preview: Preview | None = None  # what a change to an existing file would do


@dataclass
class Shaped:
    rule: Rule
    violating: Probe
    compliant: Probe


def _write(path: str, content: str) -> Probe:
    return Probe(ToolCall(tool="write", arguments={"path": path, "content": content}))


def _bash(cmd: str, history: list[ToolCall] | None = None) -> Probe:
    return Probe(ToolCall(tool="bash", arguments={"cmd": cmd}), history or [])


def _write_pair(rule: Rule, path: str, violating: str, compliant: str) -> Shaped:
    """The most common self-check: one file written against the rule, then within it."""
    return Shaped(rule, _write(path, violating), _write(path, compliant))


NEG = r"\b(?:never|no|not|don'?t|do not|avoid|must not|mustn'?t|should not|without)\b"


def forbids(text: str, what: str) -> bool:
    """`what` (a regex) comes right after a negation: "never …", "don't …", "no …"."""
    return bool(re.search(NEG + what, text, re.I))


JS = ["*.js", "*.jsx", "*.ts", "*.tsx", "*.mjs", "*.cjs", "*.vue", "*.svelte"]
MARKUP = ["*.html", "*.jsx", "*.tsx", "*.vue", "*.svelte", "*.twig", "*.erb", "*.php"]
LANG_GLOBS = {
    "python": ["*.py"], "go": ["*.go"], "rust": ["*.rs"], "dart": ["*.dart"],
    "js": JS, "ts": JS, "kotlin": ["*.kt"], "swift": ["*.swift"], "ruby": ["*.rb"],
    "php": ["*.php"], "java": ["*.java"], "c#": ["*.cs"], "lua": ["*.lua"],
}  # fmt: skip
# Formatters and linters by name -> the files they format.
FORMATTERS = {
    "rustfmt": ["*.rs"], "cargo fmt": ["*.rs"], "gofmt": ["*.go"], "goimports": ["*.go"],
    "black": ["*.py"], "ruff format": ["*.py"], "ruff": ["*.py"], "isort": ["*.py"],
    "prettier": [*JS, "*.css", "*.scss", "*.md", "*.json"], "eslint": JS,
    "dart format": ["*.dart"], "swiftformat": ["*.swift"], "ktlint": ["*.kt"],
    "clang-format": ["*.c", "*.cc", "*.cpp", "*.h", "*.hpp"], "rubocop": ["*.rb"],
    "php-cs-fixer": ["*.php"], "stylua": ["*.lua"], "shfmt": ["*.sh"],
    "dotnet format": ["*.cs"], "terraform fmt": ["*.tf"], "mix format": ["*.ex", "*.exs"],
}  # fmt: skip
CONVENTIONAL = (
    r"^(feat|fix|docs|style|refactor|perf|test|tests|build|ci|chore|revert)(\([^)]*\))?!?: \S"
)
EMOJI = r"[\U0001F300-\U0001FAFF\u2600-\u27BF\U0001F000-\U0001F2FF]"
CASES = [
    ("kebab", r"\b(kebab[- ]case|lower[- ]?case (?:with|and) (?:dashes|hyphens))\b"),
    ("snake", r"\b(snake[_ ]case|lower[- ]?case (?:with|and) underscores)\b"),
    ("camel", r"\bcamel[- ]?case\b"),
    ("pascal", r"\bpascal[- ]?case\b"),
]
CASE_EXAMPLE = {
    "kebab": ("bad_Name", "good-name"),
    "snake": ("badName", "good_name"),
    "camel": ("bad_name", "goodName"),
    "pascal": ("badName", "GoodName"),
}


def _backticked(text: str) -> list[str]:
    return [m.strip() for m in re.findall(r"`([^`]+)`", text)]


def _globs(text: str) -> list[str]:
    out = []
    for m in PATHISH.finditer(text):
        p = m.group(1).strip(".,")
        if p and not p.startswith("http") and not re.search(r"<\w+>", p):
            out.append(p + "**" if p.endswith("/") else p)
    return out


def dir_globs(globs: list[str]) -> list[str]:
    """A path that names a directory covers its files: `db/migrations` (no extension, no
    wildcard) also reads as `db/migrations/**`; a known extensionless file stays itself."""
    out: list[str] = []
    for g in globs:
        out.append(g)
        last = g.rstrip("/").rsplit("/", 1)[-1]
        if "/" in g and "*" not in g and "." not in last and last.lower() not in KNOWN_FILES:
            out.append(g.rstrip("/") + "/**")
    return out


# "Never modify an existing migration", "applied migrations are immutable": the rule is
# about files that exist; new ones are what it asks for.
EXISTING = re.compile(
    r"\b(?:existing|already[- ](?:applied|merged|released|committed|published|shipped|"
    r"deployed|run)|applied|released|published|shipped|merged|past|old)\b",
    re.I,
)


def new_ones_allowed(clause: str, text: str) -> bool:
    """The prohibition speaks of existing files, or the text asks for a new one of the
    kind it forbids changing ("…; add a new migration instead")."""
    if EXISTING.search(clause):
        return True
    return any(
        re.search(r"\b" + re.escape(m.group(1)[:6]), clause, re.I)
        for m in re.finditer(r"\b(?:add|create|write|make)\s+(?:a\s+)?new\s+(\w{4,})", text, re.I)
    )


def _languages(text: str) -> list[str]:
    globs: list[str] = []
    for raw in re.findall(r"[\w#+]+", text):
        if raw == "go":
            continue  # the verb ("never go over 100 characters"); the language is "Go"
        word = raw.lower()
        for g in LANG_GLOBS.get(word, []) + ([FILE_TYPES[word]] if word in FILE_TYPES else []):
            if g not in globs:
                globs.append(g)
    return globs


def _example_path(globs: list[str], default: str) -> str:
    for g in globs:
        if g.startswith("*.") and "*" not in g[1:]:
            return "src/example" + g[1:]
        if g.endswith("/**") and "*" not in g[:-3]:
            return g[:-2] + "example" + default[default.rfind(".") :]
    return default


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


def _deny(
    out: list[Shaped], pattern: str, globs: list[str], bad: str, good: str, path: str
) -> None:
    rule = ContentRule(pattern=pattern, path_globs=globs)
    out.append(_write_pair(rule, path, bad, good))


def _style_content_shapes(t: str) -> list[Shaped]:
    """Named exports, emoji, tabs, inline styles, `var`."""
    out: list[Shaped] = []
    if re.search(r"\bnamed exports?\b", t, re.I) or re.search(
        NEG + r"[^.]*\bdefault exports?", t, re.I
    ):
        _deny(out, *DENIALS["default_export"])
    commits_only = re.search(r"\bcommit", t, re.I) and not re.search(
        r"\b(code|comments?|files?|docs?|documentation|source|strings?|anywhere|everywhere|"
        r"output|ui|logs?|readme|markdown)\b",
        t,
        re.I,
    )
    if forbids(t, r"[^.]*\b(emojis?|emoji)\b") and not commits_only:
        out.append(
            _write_pair(ContentRule(pattern=EMOJI), "src/a.py", "x = 1  # \u2705\n", "x = 1\n")
        )
    if forbids(t, r"[^.]*\b(emojis?|emoji)\b") and re.search(r"\bcommit", t, re.I):
        out.append(
            Shaped(
                CommitMessageRule(pattern=EMOJI),
                _bash("git commit -m 'fix: a \u2728'"),
                _bash("git commit -m 'fix: a'"),
            )
        )
    if re.search(
        NEG + r"[^.]*\btabs?\b|\bspaces?,? (?:not|no|never) tabs?\b|\b\d[- ]space indent", t, re.I
    ):
        _deny(out, *DENIALS["tabs"])
    if forbids(t, r"[^.]*\binline[- ]styles?\b"):
        _deny(out, *DENIALS["inline_style"])
    if forbids(t, r"[^.]*\bvar\b") and re.search(r"\b(const|let|var)\b", t):
        _deny(out, *DENIALS["var"])
    return out


def _code_content_shapes(t: str) -> list[Shaped]:
    """Debug output, stdlib logging, placeholders, star imports, `.then()`."""
    out: list[Shaped] = []
    if re.search(
        NEG + r"[^.]*(?:\bprint\(\)|`print`|\bprint\s+statements?\b)", t, re.I
    ) or re.search(r"\b(logging|logger)\b[^.]*\binstead of\s+`?print", t, re.I):
        langs = _languages(t) or ["*.py"]
        _deny(
            out,
            r"^\s*print\(",
            langs,
            "print('debug')\n",
            "log.info('debug')\n",
            _example_path(langs, "src/example.py"),
        )
    if forbids(t, r"[^.]*\bdebugger\b"):
        _deny(out, *DENIALS["debugger"])
    if re.search(r"\bimport\s+logging\b|\bstdlib\s+`?logging", t, re.I) and re.search(
        r"\bNOT\b|\bnot\b|never", t
    ):
        _deny(out, *DENIALS["stdlib_logging"])
    if re.search(r"\bunresolved placeholders?\b", t, re.I):
        _deny(out, *DENIALS["template_placeholder"])
    if re.search(r"\bwildcard imports?\b|\bstar imports?\b|\bexplicit imports?\b", t, re.I):
        _deny(out, *DENIALS["star_import"])
    if re.search(r"`\.then\(\)`|\braw\s+`?\.then\b", t, re.I) and re.search(NEG, t, re.I):
        _deny(out, *DENIALS["then_chain"])
    return out


def _markup_content_shapes(t: str) -> list[Shaped]:
    """Banned tags and attribute quoting."""
    out: list[Shaped] = []
    # "don't use raw `<img>` tags", "no inline `<script>` tags in `index.html`".
    for m in re.finditer(NEG + r"[^.]*?(?P<inline>\binline\s+)?`<(?P<tag>[a-z][\w-]*)>`", t, re.I):
        tag = m.group("tag").lower()
        inline = r"(?![^>]*\bsrc\s*=)" if m.group("inline") and tag == "script" else ""
        named = [
            g for g in _globs(t) if g.rsplit(".", 1)[-1] in ("html", "twig", "vue", "tsx", "jsx")
        ]
        globs = named or MARKUP
        path = named[0] if named else "src/example.html"
        _deny(out, rf"<{tag}\b{inline}", globs, f"<{tag}>x</{tag}>\n", "<div>x</div>\n", path)
    if re.search(r"\bdouble quotes? for (?:html )?attributes\b", t, re.I):
        _deny(out, *DENIALS["single_quoted_attribute"])
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
    return [_write_pair(rule, "src/a.py", "x = 1\n", f"# {needle}\nx = 1\n")]


def _import_re(module: str) -> str:
    m = re.escape(module.strip("/").replace("/", "."))
    slash = re.escape(module.strip("/"))
    # The module anywhere in a path or dotted name: `'../db/x'`, `'@/db'`, `from app.db import`.
    return (
        rf"^\s*(?:import\s+(?:[\w.]*\.)?{m}\b|from\s+(?:[\w.]*\.)?{m}\b|"
        rf"import\b.*\bfrom\s+['\"](?:[^'\"\s]*/)?{slash}\b|"
        rf".*\brequire\(['\"](?:[^'\"\s]*/)?{slash}\b|use\s+(?:\w+::)*{m}\b)"
    )


# What names a part of a codebase after its name: "the `ui/` package", "domain layer".
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
        rule = ContentRule(pattern=_import_re(dst), path_globs=globs)
        path = src.rstrip("/") + "/a.ts"
        out.append(
            _write_pair(
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
        owner = [g for g in _globs(t) if g not in globs and "." in g.rsplit("/", 1)[-1]]
        # A folder's own files import from it: "never import from `internal/`" is about
        # everyone else.
        owner += [f"**/{x.strip('/')}/**" for x in mods if x.endswith("/")]
        pattern = "|".join(f"(?:{_import_re(x)})" for x in mods)
        rule = ContentRule(pattern=pattern, path_globs=globs, exclude_globs=owner)
        path = f"src/{where.strip('/')}/a.py" if globs else "src/a.py"
        out.append(
            _write_pair(rule, path, f"import {mods[0].replace('/', '.')}\n", "import json\n")
        )
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
        _write_pair(
            rule,
            path,
            "import { x } from '../somewhere_else/x';\n",
            f"import {{ x }} from '../{allowed[0]}/x';\n",
        )
    ]


# -- commands, git, sequences ----------------------------------------------------------------


def git_shapes(text: str) -> list[Shaped]:
    t = text
    out: list[Shaped] = []
    if re.search(r"\bconventional[- ]commits?\b", t, re.I) or (
        re.search(r"\bcommit", t, re.I)
        and re.search(r"`?\b(feat|fix|type)(\([^)]*\))?:|`<type>(?:\(<scope>\))?!?:", t)
        and not _negated(t, "conventional")
    ):
        rule = CommitMessageRule(pattern=CONVENTIONAL, must_match=True)
        out.append(
            Shaped(
                rule,
                _bash("git commit -m 'updated stuff'"),
                _bash("git commit -m 'fix: handle empty input'"),
            )
        )
    language = re.search(r"\b(chinese|english)\b|(中文|英文)", t, re.I)
    if language and re.search(r"\bcommit(?:s| messages?)\b|提交", t, re.I):
        chinese = (language.group(1) or "").lower() == "chinese" or language.group(2) == "中文"
        rule = CommitMessageRule(pattern=CJK_CHARS, must_match=chinese)
        zh, en = _bash("git commit -m '修复空输入'"), _bash("git commit -m 'fix: empty input'")
        out.append(Shaped(rule, en, zh) if chinese else Shaped(rule, zh, en))
    m = re.search(
        NEG + r"\s+commit\s+(?P<what>.+?)(?:\s+(?:unless|without|to|into)\b|[.;(](?:\s|$)|$)",
        t,
        re.I,
    )
    if m:
        what = m.group("what")
        named = [
            b for b in _backticked(what) if re.fullmatch(r"[\w.*/-]+", b) and not is_commandish(b)
        ]
        globs = named + [g for g in _globs(what) if g not in named]
        globs += [FILE_TYPES[w] for w in re.findall(r"\w+", what.lower()) if w in FILE_TYPES]
        for kind, kind_globs in COMMITTED_KINDS.items():
            if re.search(kind, what, re.I):
                globs += [g for g in kind_globs if g not in globs]
        for g in globs:
            rx = re.escape(g).replace(r"\*\*", ".*").replace(r"\*", "[^\\s/]*")
            pattern = rf"\bgit\s+(?:add|commit)\b[^;&|]*?(?<![\w.])(?:\S*/)?{rx}(?![\w.])"
            example = g.replace("**", "x").replace("*", "report")
            out.append(
                Shaped(
                    CommandRule(pattern=pattern),
                    _bash(f"git add {example}"),
                    _bash("git add src/main.py"),
                )
            )
    return out


# Kinds of files a "never commit …" names in words -> their globs.
COMMITTED_KINDS = {
    r"\bexcel\b": ["*.xlsx", "*.xls"],
    r"\b(?:secrets?|credentials?|api keys?|private keys?)\b": [".env", "*.pem", "*.key"],
    r"\bbinar(?:y|ies)\b": ["*.exe", "*.bin"],
    r"\bnode_modules\b": ["node_modules/**"],
    r"\bbuild (?:artifacts?|artefacts?|outputs?)\b": ["dist/**", "build/**"],
    r"\blogs?(?: files?)?\b": ["*.log"],
}


def _step_command(token: str) -> str | None:
    token = token.strip().rstrip(".").strip()
    if (
        token
        and not token.startswith("-")
        and (
            is_commandish(token)
            or token.split()[0].lower() in FORMATTERS
            or "/" in token.split()[0]
            # `buf generate`, `just lint`: a program this list does not know, with its
            # subcommand (a lone unknown word could be anything).
            or re.fullmatch(r"[a-z][\w.-]*(?:\s+[\w:./=-]+)+", token) is not None
        )
    ):
        return token
    return None


def _step_regex(step: str) -> str:
    words = step.replace("...", "").split()
    return r"(^|\s)" + r"\s+".join(re.escape(w) for w in words[:3]) + r"(?![\w-])"


def _sequence_shape(step: str, before: str, globs: list[str]) -> Shaped:
    rule = SequenceRule(command=_step_regex(step), step=step, before=before, after_globs=globs)
    path = _example_path(globs, "src/example.py")
    change = ToolCall(tool="write", arguments={"path": path, "content": "x\n"})
    ran = ToolCall(tool="bash", arguments={"cmd": step})
    commit = "git commit -m 'fix: x'"
    return Shaped(rule, _bash(commit, [change]), _bash(commit, [change, ran]))


# Steps named only by their kind ("run the tests", "run the linter"): any tool of the kind
# counts, and the guard names the kind.
STEP_KINDS = {
    "test": (r"\b(test|tests|pytest|jest|vitest|unittest)\b", "the test suite", "npm test"),
    "lint": (
        r"\b(lint|eslint|ruff|flake8|pylint|clippy|golangci-lint|rubocop|ktlint|swiftlint|"
        r"biome|stylelint)\b",
        "the linter",
        "npm run lint",
    ),
}


def _test_suite_shape(kind: str = "test") -> Shaped:
    """ "Run the tests before committing" with no command named: any test runner counts."""
    command, step, example = STEP_KINDS[kind]
    rule = SequenceRule(command=command, step=step, before="commit", after_globs=[], runnable=False)
    change = ToolCall(tool="write", arguments={"path": "src/a.py", "content": "x\n"})
    ran = ToolCall(tool="bash", arguments={"cmd": example})
    return Shaped(
        rule,
        _bash("git commit -m 'fix: x'", [change]),
        _bash("git commit -m 'fix: x'", [change, ran]),
    )


def sequence_shapes(text: str) -> list[Shaped]:
    """ "after changing X run `Y`", "run `Y` before every commit", "use `fmt` for formatting"."""
    t = text
    out: list[Shaped] = []
    # When the step is due: before a commit, after a change, or before finishing.
    trigger = re.search(
        r"\b(before|prior to)\s+(?:you\s+)?(?:every\s+|each\s+|any\s+)?(?:git\s+)?commit|\bon every commit"
        r"|\bpre-?commit\b"
        r"|\b(after|whenever|when you|every time|each time|once)\b[^.]*\b(chang|edit|modif|writ|touch|complet|implement)\w*"
        r"|\bon (?:any|every|each) (?:\w+ )?(?:file )?(?:you )?(?:change|edit)|\bany \w+ files? you edit\b"
        r"|\bbefore (?:you )?(?:finish\w*|complet\w+|submit\w*|mark\w* [^.]*\bdone|hand\w* off)"
        r"|\b(?:when|once|after) (?:you(?:'re| are|'ve| have) )?(?:done|finished)\b",
        t,
        re.I,
    )
    # "make sure `npm run build` passes", "`bun run build`でビルドエラーがないか確認".
    verify = re.search(
        r"\b(make sure|ensure|verify|check|confirm)\b[^.]*\b((?:must|should|to|will|still) pass"
        r"|passes|succeeds?|no (?:\w+ )?errors?|green)\b|確認|确认|検証|检查",
        re.sub(r"`[^`]*`", "`cmd`", t),  # `ruff check .`: a dot in a command ends nothing
        re.I,
    )
    # "run `X`", "regenerate the stubs with `X`".
    runs = re.search(r"\b(run|execute|use|verify with|check with|invoke)\b|\bwith\s+`", t, re.I)
    # "`npm run build` — verify the build succeeds" is a glossary line, not a rule.
    glossary = re.match(r"^\s*`[^`]+`\s*[:\u2014\u2013-]\s", t)
    steps = [s for s in (_step_command(b) for b in _backticked(t)) if s]
    if re.search(r"\bpre-commit\b", t, re.I) and re.search(r"\brun\b", t, re.I) and not steps:
        steps = ["pre-commit run"]
    if not steps and re.search(r"\b(unit )?tests?\b", t, re.I) and runs and trigger:
        out.append(_test_suite_shape())
        return out
    pushes = re.search(r"\bbefore\s+(?:you\s+)?(?:every\s+|each\s+)?push", t, re.I)
    if (
        not steps
        and re.search(r"\b(?:the\s+)?(?:linters?|lint)\b", t, re.I)
        and runs
        and (trigger or pushes)
    ):
        # Checked at the commit, which comes before any push.
        out.append(_test_suite_shape("lint"))
        return out
    if steps and verify and not glossary:
        out.append(_sequence_shape(steps[0], "commit", _languages(t)))
        return out
    if steps and runs and trigger:
        out.append(_sequence_shape(steps[0], "commit", _languages(t)))
        return out
    # "Use `rustfmt` for code formatting", "run `gofmt` on any Go file you edit".
    for name, globs in FORMATTERS.items():
        if (
            re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", t, re.I)
            and re.search(r"\b(format\w*|lint\w*|edit|run)\b", t, re.I)
            and re.search(
                # "Format with `black`": the imperative names the formatter too.
                r"\b(always|must|should|use|every|any|each|all|before|after|ensure|make sure)\b"
                r"|^\W*format\w*\s+(?:\w+\s+){0,2}(?:with|using)\b",
                t,
                re.I,
            )
            and not re.search(NEG + r"\s+(?:run|use)\s+`?" + re.escape(name), t, re.I)
        ):
            out.append(_sequence_shape(name, "commit", globs))
            break
    return out


# -- names -----------------------------------------------------------------------------------


def naming_shapes(text: str) -> list[Shaped]:
    t = text
    target = (
        "directory"
        if re.search(r"\b(director(y|ies)|folders?)\b", t, re.I)
        else "file"
        if re.search(r"\bfiles?\b|\.\w{1,4}\b", t, re.I)
        else None
    )
    if target is None:
        return []
    out = []
    for style, rx in CASES:
        if re.search(rx, t, re.I):
            globs = [g for g in _languages(t) if g.startswith("*.")]
            bad, good = CASE_EXAMPLE[style]
            ext = globs[0][1:] if globs else ".ts"
            if target == "file":
                b, g = f"src/{bad}{ext}", f"src/{good}{ext}"
            else:
                b, g = f"src/{bad}/index{ext}", f"src/{good}/index{ext}"
            rule = NamingRule(style=style, target=target, path_globs=globs)
            out.append(Shaped(rule, _write(b, "x\n"), _write(g, "x\n")))
            break
    return out


# -- paths -----------------------------------------------------------------------------------


PATH_PROHIBITION = re.compile(
    r"\b(do not|don'?t|never)\s+(hand[- ]?)?(edit|modify|write|touch|change)\b"
    r"|\bhand[- ]?(edit|writ)\w*\b|\b(?:is|are)\s+(?:auto-?)?generated\b",
    re.I,
)


def _path_globs(text: str) -> list[str]:
    globs = [g for g in _globs(text) if not g.startswith(("http", "npx"))]
    return globs + [g for g in _backticked(text) if g.startswith("*.") and g not in globs]


# Where one instruction ends and the next begins: a sentence, a semicolon, or a comma
# before a new imperative or "instead" ("don't edit it by hand, run `pnpm gen` in web/").
INSTEAD_CUT = (
    r";|\.\s+(?=[A-Z`])|,\s*(?:and\s+|but\s+)?(?=(?:run|use|add|put|write|create|call|fix|"
    r"make|let|go)\b)|\binstead\b"
)


def path_shapes(text: str) -> list[Shaped]:
    """ "`src/ui/` is generated, do not hand-edit", "Avoid: `*.Designer.cs` (auto-generated)".

    The paths are read from the clause that holds the prohibition: "never edit vendor/;
    make the change under src/" forbids vendor/ only, and a new instruction after a comma
    ("…, run `pnpm gen` in web/") is what to do instead. A prohibition whose clause names no
    path ("Generated code lives in `gen/`. Never hand-edit it.") takes the paths of the
    clauses before it, where "it" points; "X is generated from Y" forbids X, not Y."""
    avoid = re.search(r"\bavoid\b", text, re.I) and re.search(r"\bgenerated\b", text, re.I)
    if not (PATH_PROHIBITION.search(text) or avoid):
        return []
    if avoid:
        t = text
    else:
        clauses = [c for c in re.split(INSTEAD_CUT, text) if c]
        first = next((i for i, c in enumerate(clauses) if PATH_PROHIBITION.search(c)), 0)
        t = next(
            (c for c in clauses if PATH_PROHIBITION.search(c) and _path_globs(c)),
            " ".join(clauses[:first]),
        )
        generated = re.search(r"\b(?:is|are)\s+(?:auto-?)?generated\b", t, re.I)
        if generated and _path_globs(t[: generated.start()]):
            t = t[: generated.start()]
    globs = _path_globs(t)
    if not globs:
        return []
    # With several paths, the one the prohibition governs comes last ("`src/components/`
    # (app), `src/components/ui/` (do not hand-edit)"); a backticked path is the named one.
    ticked = [g for g in globs if f"`{g.removesuffix('**')}`" in t or f"`{g}`" in t]
    last = (ticked or globs)[-1:]
    target = last if len(globs) > 1 and not re.search(r"\bavoid\b", t, re.I) else globs
    target = dir_globs(target)
    literal = next((g for g in target if "*" not in g), None)
    inside = literal or _example_path(target, "x.txt").replace("**", "x").replace("*", "x")
    if new_ones_allowed(t, text):
        return [existing_only_shape(PathRule(globs=target, existing_only=True))]
    rule = PathRule(globs=target)
    return [Shaped(rule, _write(inside, "x\n"), _write("elsewhere/ok.txt", "x\n"))]


def existing_only_shape(rule: PathRule) -> Shaped:
    """Violating: a write over a file that exists there; compliant: a new file there."""
    base = rule.globs[-1].replace("/**", "").replace("*", "x")
    old = f"{base}/0001_old.py" if rule.globs[-1].endswith("/**") else base
    preview = Preview(path=old, old_content="old\n", new_content="x\n", diff="", old_sha256=None)
    over = Probe(ToolCall(tool="write", arguments={"path": old, "content": "x\n"}), [], preview)
    new = f"{base}/0002_new.py" if rule.globs[-1].endswith("/**") else "elsewhere/new.py"
    return Shaped(rule, over, _write(new, "x\n"))


# -- conventions a regex on the added lines can keep -----------------------------------------

CJK_CHARS = r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]"
CODE_FILES = [
    "*.py", *JS, "*.go", "*.rs", "*.java", "*.kt", "*.swift", "*.rb", "*.php", "*.cs",
    "*.dart", "*.c", "*.cc", "*.cpp", "*.h", "*.hpp", "*.lua", "*.sh",
]  # fmt: skip
UI_FILES = ["*.jsx", "*.tsx", "*.vue", "*.svelte"]
# Writing to stdout where a logger is wanted, per language.
OUTPUT_CALLS = {
    "console.log": (r"\bconsole\.(?:log|debug|info)\(", JS),
    "process.stdout.write": (r"\bprocess\.stdout\.write\(", JS),
    "print": (r"^\s*print\(", ["*.py"]),
    "System.out.println": (r"\bSystem\.(?:out|err)\.print", ["*.java", "*.kt"]),
    "fmt.Println": (r"\bfmt\.Print", ["*.go"]),
    "println!": (r"\bprintln!\(", ["*.rs"]),
}
# "tests go in `tests/`", "put notebooks under `notebooks/`": the files a kind names.
FILE_KINDS = {
    "notebook": ["*.ipynb"],
    "test": ["test_*.py", "*_test.py", "*_test.go", "*.test.*", "*.spec.*"],
    "migration": ["*migration*"],
}
MANIFESTS = [
    "Cargo.toml", "package.json", "pyproject.toml", "requirements*.txt", "Gemfile",
    "go.mod", "pubspec.yaml", "composer.json", "build.gradle*", "pom.xml",
]  # fmt: skip
JS_MANAGERS = ("npm", "yarn", "pnpm", "bun")
DROP_IN = {"pnpm", "bun"}  # they take npm's subcommands: rewriting keeps the command working


def _negated(t: str, word: str) -> bool:
    """`word` sits right after a negation ("don't use pnpm", "no docstrings")."""
    return forbids(t, r"\s+(?:\w+\s+){0,2}`?" + re.escape(word))


def convention_shapes(text: str) -> list[Shaped]:
    """Code conventions of languages and frameworks: docstrings, JSDoc, type hints,
    function components, arrow parentheses, interfaces, force unwraps, hard-coded text or
    colours, a logger instead of stdout, licence headers, the language of strings."""
    t = text
    return [
        *_annotation_shapes(t),
        *_function_style_shapes(t),
        *_declaration_shapes(t),
        *_hardcoded(t),
        *_logger_instead(t),
        *_licence_header(t),
        *_artefact_language(t),
    ]


def _annotation_shapes(t: str) -> list[Shaped]:
    """Docstrings, JSDoc, type hints."""
    out: list[Shaped] = []
    langs = _languages(t)
    python = not langs or "*.py" in langs
    if (
        re.search(r"\bdocstrings?\b", t, re.I)
        and re.search(r"\b(all|every|each|public|functions?|methods?|classes?)\b", t, re.I)
        and not _negated(t, "docstring")
        and python
    ):
        _deny(out, *DENIALS["missing_docstring"])
    if re.search(r"\bjs ?doc\b", t, re.I) and not _negated(t, "jsdoc"):
        _deny(out, *DENIALS["missing_jsdoc"])
    if (
        re.search(r"\btype (?:hints?|annotations?)\b", t, re.I)
        and not _negated(t, "type")
        and python
    ):
        _deny(out, *DENIALS["missing_type_hints"])
    return out


def _function_style_shapes(t: str) -> list[Shaped]:
    """Function components, arrow-function parentheses."""
    out: list[Shaped] = []
    if (
        re.search(
            r"\b(?:use|write|only|always|prefer)\s+(?:only\s+)?(?:react\s+)?function(?:al)? components?",
            t,
            re.I,
        )
        and not _negated(t, "function")
    ) or forbids(t, r"\s+(?:\w+\s+)?class components?\b"):
        _deny(out, *DENIALS["class_component"])
    if re.search(r"\barrow functions?\b", t, re.I) and re.search(r"\bparen", t, re.I):
        if re.search(r"\b(without|omit\w*|no|avoid|drop)\b[^.]*\bparen", t, re.I):
            _deny(out, *DENIALS["arrow_parens"])
        elif re.search(r"\b(always|with|require\w*|include)\b[^.]*\bparen", t, re.I):
            _deny(out, *DENIALS["arrow_bare_parameter"])
    return out


def _declaration_shapes(t: str) -> list[Shaped]:
    """Types over interfaces (or back), force unwraps, `_private` fields."""
    out: list[Shaped] = []
    if re.search(
        r"\btypes?\b`?[^.]*\b(?:over|instead of|rather than|not)\s+`?interfaces?\b", t, re.I
    ):
        _deny(out, *DENIALS["interface"])
    elif re.search(
        r"\binterfaces?`?\s+(?:for\s+(?:all\s+)?(?:object|props|data)|over|instead of|rather than)\b",
        t,
        re.I,
    ) and re.search(r"\b(use|prefer|always)\b", t, re.I):
        _deny(out, *DENIALS["type_alias"])
    if re.search(r"\bforce[- ]?unwrap", t, re.I) and re.search(NEG, t, re.I):
        _deny(out, *DENIALS["force_unwrap"])
    if re.search(r"\bprivate (?:fields?|members?|properties|variables?)\b", t, re.I) and re.search(
        r"\bprefix\w*\s+(?:with\s+)?(?:an?\s+)?(?:`_`|underscores?)|\bunderscore prefix", t, re.I
    ):
        _deny(out, *DENIALS["private_without_underscore"])
    return out


def _licence_header(t: str) -> list[Shaped]:
    """A licence header in every code file."""
    if not (
        re.search(
            r"\b(licen[cs]e|copyright)\s+(?:headers?|notices?|comments?|banners?|lines?)\b|\bspdx\b",
            t,
            re.I,
        )
        and re.search(r"\b(every|all|each|new|must|should|always|include|add|start)\b", t, re.I)
        and not _negated(t, "licen")
    ):
        return []
    rule = ContentRule(
        pattern=r"SPDX-License-Identifier|[Cc]opyright|Licensed under",
        path_globs=CODE_FILES,
        required=True,
    )
    return [_write_pair(rule, "src/a.py", "x = 1\n", "# SPDX-License-Identifier: MIT\nx = 1\n")]


def _hardcoded(t: str) -> list[Shaped]:
    """ "never hard-code text, use `t()`", "use theme values - never hardcode" colours."""
    hard = re.search(r"\bhard[- ]?cod\w*|\bdirect(?:ly)?\s+(?:text\s+)?embed\w*", t, re.I)
    if not hard:
        return []
    out: list[Shaped] = []
    if re.search(r"\b(text|strings?|copy|labels?|literals?|messages?)\b", t, re.I) and (
        re.search(NEG, t, re.I) or re.search(r"\b(instead|rather than|warning)\b", t, re.I)
    ):
        for pattern, globs, bad, good, path in (
            (r">[ \t]*[A-Za-z][^<>{}\n]*[A-Za-z.!?:][ \t]*</", UI_FILES,
             "<h1>Welcome back</h1>\n", "<h1>{t('welcome')}</h1>\n", "src/Home.tsx"),
            (r"\bText\(\s*['\"][^'\"\n]*[A-Za-z]", ["*.dart"],
             "Text('Welcome back')\n", "Text(l10n.welcome)\n", "lib/home.dart"),
            (r"\.(?:text|title)\s*=\s*\"[^\"\n]*[A-Za-z]", ["*.swift"],
             'label.text = "Welcome back"\n', "label.text = L10n.welcome\n", "Sources/Home.swift"),
        ):  # fmt: skip
            out.append(_write_pair(ContentRule(pattern=pattern, path_globs=globs), path, bad, good))
    if re.search(r"\b(colou?rs?|theme)\b", t, re.I):
        rule = ContentRule(
            pattern=r"(?<=['\":\s])#(?:[0-9a-fA-F]{3}){1,2}(?:[0-9a-fA-F]{2})?\b|\brgba?\(",
            path_globs=[*JS, "*.css", "*.scss"],
            exclude_globs=["*theme*", "*tokens*", "*colors*"],
        )
        out.append(
            _write_pair(
                rule,
                "src/Card.tsx",
                "const s = { color: '#ff0000' };\n",
                "const s = { color: theme.colors.error };\n",
            )
        )
    return out


def _logger_instead(t: str) -> list[Shaped]:
    """ "`console.log` in runtime code: use the shared logger", "Don't use print for
    debugging; use the logger" forbid the named call on added lines of code files."""
    if not re.search(r"\b(?:log(?:ger|ging|s)?|tracing|slog|structlog)\b", t, re.I):
        return []
    for m in re.finditer(r"\b(?:use|prefer)\s+`?(?:console\.log|print)\b", t, re.I):
        if not re.search(NEG + r"\s*$", t[: m.start()], re.I):
            return []  # "use print for CLI output": stdout is what the rule wants
    out = []
    for name, (pattern, globs) in OUTPUT_CALLS.items():
        if re.search(r"(?<![\w.])" + re.escape(name) + r"(?:\(\))?(?![\w.])", t):
            call = name + "('x')"
            path = _example_path(globs, "src/example.js")
            out.append(
                _write_pair(
                    ContentRule(pattern=pattern, path_globs=globs),
                    path,
                    call + "\n",
                    "log.info('x')\n",
                )
            )
    return out


def _artefact_language(t: str) -> list[Shaped]:
    """ "strings and error messages in English", "代码注释使用英文": no CJK in code."""
    if not re.search(r"\benglish\b|英文|英語", t, re.I) or re.search(
        r"\b(reply|respond|answer|talk|chat|speak|user|conversation|commit)\w*|用户|对话|回答|回复",
        t,
        re.I,
    ):
        return []
    strings = re.search(
        r"\bstrings?\b|\berror messages?\b|\blog messages?\b|字符串|错误信息|文字列", t, re.I
    )
    if re.search(r"\bcomments?\b|注释|コメント", t, re.I) and not strings:
        pattern, bad = rf"(?:#|//|/\*|\*|<!--).*{CJK_CHARS}", "x = 1  # 计数\n"
    elif strings:
        pattern, bad = rf"[\"'`][^\"'`\n]*{CJK_CHARS}", 'raise ValueError("参数错误")\n'
    elif re.search(r"\b(code|identifiers?|variable names?)\b|代码|コード", t, re.I):
        pattern, bad = CJK_CHARS, "计数 = 1\n"
    else:
        return []
    rule = ContentRule(pattern=pattern, path_globs=CODE_FILES)
    return [_write_pair(rule, "src/a.py", bad, 'x = 1  # "count"\n')]


def dependency_shapes(text: str) -> list[Shaped]:
    """ "use the `ocrs` crate, not tesseract": the other library is never imported or added."""
    out: list[Shaped] = []
    for m in re.finditer(
        r"\buse\s+(?:the\s+)?`?(?P<good>[\w@/.-]+)`?\s+(?:crate|package|library|lib|module|gem)s?\b"
        r"[^.;]*?\b(?:not|instead of|rather than|over)\s+(?:the\s+)?`?(?P<bad>[\w@/.-]+)`?",
        text,
        re.I,
    ):
        bad, good = m.group("bad").rstrip("."), m.group("good").rstrip(".")
        if (
            bad.lower() in KNOWN_CLI
            or bad.lower() in ("a", "an", "the", "any", "it")
            or len(bad) < 3
        ):
            continue
        module = bad.replace("-", "_")
        out.append(
            _write_pair(
                ContentRule(pattern=_import_re(module)),
                "src/a.py",
                f"import {module}\n",
                f"import {good.replace('-', '_')}\n",
            )
        )
        out.append(
            _write_pair(
                ContentRule(
                    pattern=rf"^\s*[\"']?{re.escape(bad)}[\"']?(?:\s*[=:<>~^\[]|\s*$)",
                    path_globs=MANIFESTS,
                ),
                "Cargo.toml",
                f'[dependencies]\n{bad} = "1"\n',
                f'[dependencies]\n{good} = "1"\n',
            )
        )
    return out


def program_pattern(program: str) -> str:
    """A program at the start of a command segment (after ;, &&, ||, |, `(` or `sudo`)."""
    return SEGMENT_START + re.escape(program) + r"(?=\s|$)"


def package_manager_shapes(text: str) -> list[Shaped]:
    """ "always use pnpm", "yarn is our package manager", "use `uv` for dependencies"."""
    t = text
    out: list[Shaped] = []
    for pm in (*JS_MANAGERS, "uv", "poetry"):
        q = rf"`?{pm}`?(?![\w-])"
        chosen = re.search(
            rf"\b(?:always|only)\s+(?:use\s+)?{q}|\buse\s+{q}(?!\s+(?:run|exec|dlx|x)\b)"
            rf"|(?<![\w-]){q}\s+(?:is|as)\s+(?:the|our)\s+(?:\w+\s+)?package manager"
            rf"|\bpackage manager\b[^.]*?(?<![\w-]){q}",
            t,
            re.I,
        )
        if not chosen or _negated(t, pm):
            continue
        if pm in JS_MANAGERS:
            for other in JS_MANAGERS:
                if other == pm:
                    continue
                replace = r"\g<1>" + pm if pm in DROP_IN else None
                rule = CommandRule(pattern=program_pattern(other), replace=replace)
                out.append(Shaped(rule, _bash(f"{other} install"), _bash(f"{pm} install")))
        elif pm == "uv":
            for pip in ("pip", "pip3"):
                rule = CommandRule(pattern=program_pattern(pip), replace=r"\g<1>uv pip")
                out.append(Shaped(rule, _bash(f"{pip} install x"), _bash("uv pip install x")))
        else:
            rule = CommandRule(pattern=SEGMENT_START + r"pip3?\s+install\b")
            out.append(Shaped(rule, _bash("pip install x"), _bash("poetry add x")))
        break
    return out


def runner_shapes(text: str) -> list[Shaped]:
    """ "Use `uv run` for all Python commands", "run scripts through `poetry run`": the
    program is rewritten to run under the named runner."""
    m = re.search(
        r"\b(?:use|through|via|with)\s+`(?P<runner>[\w.-]+(?:\s+[\w.-]+)?)`\s+(?:for|to run)\s+"
        r"(?:all|every|any|each)\s+(?P<prog>\w+)\s+(?:commands?|scripts?|invocations?|calls?)\b",
        text,
        re.I,
    )
    if not m:
        return []
    runner, prog = m.group("runner"), m.group("prog").lower()
    programs = {"python": ["python", "python3"], "node": ["node"], "ruby": ["ruby"]}.get(
        prog, [prog] if prog in KNOWN_CLI else []
    )
    out = []
    for p in programs:
        if runner.split()[0] == p:
            continue
        rule = CommandRule(pattern=program_pattern(p), replace=rf"\g<1>{runner} {p}")
        out.append(Shaped(rule, _bash(f"{p} -m pytest"), _bash(f"{runner} {p} -m pytest")))
    return out


def wrapper_shapes(text: str) -> list[Shaped]:
    """ "Tests on Linux require xvfb: `xvfb-run -a npm test`", "CLI commands run inside
    ddev: `ddev exec php craft ...`": the bare command is rewritten to the wrapped one."""
    out: list[Shaped] = []
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        if not re.search(
            r"\b(require[sd]?|must|always|only|should)\b|\ball\b[^.`]*\bcommands?\b",
            sentence,
            re.I,
        ):
            continue
        for span in _backticked(sentence):
            if re.search(r"[;&|<>\\$]", span):
                continue
            words = span.replace("...", "").replace("\u2026", "").split()
            for i in range(1, len(words)):
                if words[i].lower() in KNOWN_CLI and words[i].lower() != words[0].lower():
                    inner, wrapper = " ".join(words[i:]), " ".join(words[:i])
                    pattern = SEGMENT_START + r"\s+".join(map(re.escape, words[i:])) + r"(?![\w-])"
                    rule = CommandRule(pattern=pattern, replace=rf"\g<1>{wrapper} {inner}")
                    out.append(Shaped(rule, _bash(inner), _bash(f"{wrapper} {inner}")))
                    break
    return out


def placement_shapes(text: str) -> list[Shaped]:
    """ "Use Jupyter notebooks in the `notebooks/` directory", "tests go in `tests/`":
    files of that kind are written only under the directory."""
    where = r"(?:the\s+)?`?(?P<{}>[\w.-]+(?:/[\w.-]+)*/)`?"
    m = re.search(
        r"\b(?:put|keep|place|store|save|create|add|write|use)\s+(?:(?:all|new|any|the)\s+)*"
        r"(?:[\w-]+\s+){0,2}?(?P<kind>[\w-]+?)s?\s+(?:files?\s+)?(?:only\s+)?"
        r"(?:in|under|inside|into)\s+" + where.format("dir") + r"|\b(?P<kind2>[\w-]+?)s?\s+"
        r"(?:files?\s+)?(?:(?:must|should)\s+(?:go|belong|live|be kept|be placed)|go|belong)\s+(?:only\s+)?"
        r"(?:in|under|inside)\s+" + where.format("dir2"),
        text,
        re.I,
    )
    if not m:
        return []
    kind = (m.group("kind") or m.group("kind2")).lower()
    folder = m.group("dir") or m.group("dir2")
    files = FILE_KINDS.get(kind) or ([FILE_TYPES[kind]] if kind in FILE_TYPES else [])
    if not files:
        return []
    rule = PathRule(globs=[folder + "**"], mode="allow", tools=["write"], files=files)
    name = files[0].replace("*", "example")
    return [Shaped(rule, _write(name, "x\n"), _write(folder + name, "x\n"))]


def read_first_shapes(text: str) -> list[Shaped]:
    """ "Always read `docs/prd.md` before implementing", "Read AGENTS.md first"."""
    m = re.search(
        r"(?:^|[.;:]\s+|\b(?:always|must|should|first)\s+)read(?![\w-])(?P<what>[^.;]*(?:\.\w[^.;]*)*)",
        text,
        re.I,
    )
    if not m or not re.search(r"\b(always|first|before|must|start\w*|when working)\b", text, re.I):
        return []
    paths = [g for g in _globs(m.group("what")) if "*" not in g and "." in g.rsplit("/", 1)[-1]]
    if not paths:
        return []
    reads = [ToolCall(tool="read", arguments={"path": p}) for p in paths]
    change = ToolCall(tool="write", arguments={"path": "src/a.py", "content": "x\n"})
    return [
        Shaped(ReadFirstRule(paths=paths), Probe(change), Probe(change, reads)),
    ]


SHAPES: list[Callable[[str], list[Shaped]]] = [
    content_shapes,
    convention_shapes,
    dependency_shapes,
    git_shapes,
    sequence_shapes,
    naming_shapes,
    path_shapes,
    package_manager_shapes,
    runner_shapes,
    wrapper_shapes,
    placement_shapes,
    read_first_shapes,
]


def shaped_rules(text: str, table: Sequence[Callable[[str], list[Shaped]]] = SHAPES) -> list[Rule]:
    """The rules of every shape of `table` that `text` has whose guard passes its
    self-check."""
    rules: list[Rule] = []
    for shape in table:
        for shaped in shape(text):
            if fires(shaped):
                rules.append(shaped.rule)
    return rules


__all__ = ["KNOWN_CLI", "SHAPES", "Shaped", "fires", "shaped_rules"]


def synthesise(rule: Rule) -> Shaped | None:
    """A violating and a compliant situation for a rule the phrase patterns compiled, or
    None when its form gives no literal to build one from (a hand-written regex)."""
    from continual_lsp.lanes.guards import SizeRule, ToolRule, _literal_command

    if isinstance(rule, CommandRule):
        literal = _literal_command(rule.pattern)
        if literal is None:
            return None
        bad = literal if literal.startswith("-") is False else f"tool {literal}"
        return Shaped(rule, _bash(f"{bad} x"), _bash("echo ok"))
    if isinstance(rule, PathRule) and rule.mode == "deny" and rule.existing_only:
        return existing_only_shape(rule)
    if isinstance(rule, PathRule) and rule.mode == "deny":
        tool = "write" if "write" in rule.tools else rule.tools[0]
        inside = rule.globs[0].replace("**", "x").replace("*", "x")
        call = ToolCall(tool=tool, arguments={"path": inside, "content": "x\n"})
        if tool != "write":
            return None
        return Shaped(rule, Probe(call), _write("elsewhere/ok.txt", "x\n"))
    if isinstance(rule, ContentRule) and not rule.required:
        literal = re.sub(r"\\b|\\w\*", "", rule.pattern)
        literal = re.sub(r"\\(.)", r"\1", literal)
        if not literal or re.search(r"[\[\](){}|^$+?]", literal.replace("()", "")):
            return None
        path = _example_path(rule.path_globs, "src/example.py")
        return _write_pair(rule, path, f"x = {literal}\n", "x = 1\n")
    if isinstance(rule, SizeRule) and rule.max_lines is not None:
        return _write_pair(rule, "src/a.py", "x\n" * (rule.max_lines + 1), "x\n")
    if isinstance(rule, ToolRule) and rule.deny and not rule.existing_files_only:
        tool = rule.deny[0]
        args = {"cmd": "echo x"} if tool == "bash" else {"path": "a.txt", "content": "x"}
        other = "read" if tool != "read" else "glob"
        other_args = {"path": "a.txt"} if other == "read" else {"pattern": "*"}
        return Shaped(
            rule,
            Probe(ToolCall(tool=tool, arguments=args)),
            Probe(ToolCall(tool=other, arguments=other_args)),
        )
    return None


def fires(shaped: Shaped) -> bool:
    """The self-check: the rule's guard blocks (or, a substitution, rewrites) the violating
    situation and allows the compliant one."""
    guard = Guard("self-check", GuardSpec(message="self-check", rules=[shaped.rule]))
    bad_, good_ = shaped.violating, shaped.compliant
    bad = guard.check(bad_.call, bad_.preview, bad_.history)
    good = guard.check(good_.call, good_.preview, good_.history)
    return bad.action in ("block", "rewrite") and good.action == "allow"
