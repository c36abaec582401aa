"""Rule shapes of code conventions: identifier names, line and whitespace formatting,
operators, imports, and lines a file must keep (`repo_policy.py` has the dependency,
build and git policies).

Each shape reads one general English form of rule and returns its declarative rule with a
violating and a compliant situation it synthesises; the compiler keeps the rule only when
its guard fires on the first and lets the second through (`shapes.fires`). As in
`kit.py`, the vocabulary is the general vocabulary of software work; the names a
guard needs (a file, a token, a folder, a command) come from the rule's own text.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from continual_lsp.lanes.features import PATHISH, is_commandish
from continual_lsp.lanes.guards.spec import ContentRule, KeepRule
from continual_lsp.lanes.shapes.kit import (
    CODE_FILES,
    JS,
    NEG,
    Probe,
    Shaped,
    backticked,
    forbids,
    globs_of,
    import_re,
    languages_of,
    negated,
    write_pair,
)
from continual_lsp.text import unified_diff
from continual_lsp.tools.base import Preview, ToolCall


def _edit(path: str, old: str, new: str, before: str) -> Probe:
    """An edit of an existing file `before`, with the preview the agent would compute."""
    after = before.replace(old, new, 1)
    preview = Preview(
        path=path,
        old_content=before,
        new_content=after,
        diff=unified_diff(before, after, f"a/{path}", f"b/{path}"),
        old_sha256=None,
    )
    call = ToolCall(tool="edit", arguments={"path": path, "old": old, "new": new})
    return Probe(call, preview=preview)


# -- lines a change must keep --------------------------------------------------------------------


def keep_shapes(text: str) -> list[Shaped]:
    """ "`notes.md` is append-only", "logs are never truncated or rewritten", "`X` must not
    change", "never remove `X`"."""
    t = text
    out: list[Shaped] = []
    # Predicated ("`notes.md` is append-only"), not a glossary's "(append-only)" aside.
    append_only = re.search(
        r"\b(?:is|are|be|kept|stays?|as)\s+append[- ]only\b", t, re.I
    ) or re.search(
        r"\b(?:never|not|no|don'?t|do not|must not)\s+(?:be\s+)?(?:truncat|rewrit|overwrit)\w*",
        t,
        re.I,
    )
    files = [g for g in globs_of(t) if "." in g.rsplit("/", 1)[-1] and "*" not in g]
    if append_only and files:
        rule = KeepRule(pattern=r"\S", path_globs=files)
        before = "- first entry\n- second entry\n"
        bad = _edit(files[0], "- first entry\n", "", before)
        good = _edit(files[0], "- second entry\n", "- second entry\n- third entry\n", before)
        out.append(Shaped(rule, bad, good))
    for m in re.finditer(
        r"`(?P<a>[^`]+)`\s+(?:must|should|may|can)\s*(?:not|never|n'?t)\s+(?:be\s+)?"
        r"(?:change|changed|modified|removed|deleted|edited)\b"
        r"|\b(?:never|don'?t|do not|must not)\s+(?:change|modify|remove|delete|edit|drop)\s+"
        r"(?:the\s+)?`(?P<b>[^`]+)`",
        t,
        re.I,
    ):
        token = (m.group("a") or m.group("b")).strip()
        if PATHISH.fullmatch(token) or is_commandish(token) or len(token) < 3:
            continue  # a file is a path rule's, a command a command rule's
        rule = KeepRule(pattern=re.escape(token))
        before = f"a = 1\n{token}\nb = 2\n"
        bad = _edit("src/config.txt", f"{token}\n", "changed\n", before)
        good = _edit("src/config.txt", "b = 2\n", "b = 3\n", before)
        out.append(Shaped(rule, bad, good))
    return out


def co_requirement_shapes(text: str) -> list[Shaped]:
    """ "must include `A` with `B`", "`B` requires `A`", "always pair `A` with `B`": a line
    that uses B also has A."""
    out: list[Shaped] = []
    for m in re.finditer(
        r"\b(?:must|always|should)\s+(?:include|add|use|pair|combine)\s+`(?P<a>[^`]+)`\s+"
        r"(?:with|alongside|together with|whenever you use)\s+`(?P<b>[^`]+)`"
        r"|`(?P<b2>[^`]+)`\s+(?:requires|needs|must (?:always )?be (?:used|paired|combined) with)"
        r"\s+`(?P<a2>[^`]+)`",
        text,
        re.I,
    ):
        need, user = (m.group("a") or m.group("a2")), (m.group("b") or m.group("b2"))
        if need == user:
            continue
        pattern = rf"^(?=.*{re.escape(user)})(?!.*{re.escape(need)}).*$"
        rule = ContentRule(pattern=pattern)
        path = "src/example.tsx"
        out.append(write_pair(rule, path, f'"{user} x"\n', f'"{need} {user} x"\n'))
    return out


# -- identifiers -------------------------------------------------------------------------------

CASE_NAMES = {
    "upper": r"\b(?:upper[_ ]?snake[_ ]?case|screaming[_ ]snake[_ ]case|constant[_ ]case|"
    r"upper[_ ]?case|all[-_ ]caps|UPPER_SNAKE)\b",
    "camel": r"\b(?<!upper )camel[- ]?case\b",
    "pascal": r"\bpascal[- ]?case\b|\bupper camel[- ]?case\b",
    "snake": r"\b(?<!upper )(?<!upper_)(?<!screaming )snake[_ ]case\b",
}
NAME_RE = {
    "upper": r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*",
    "camel": r"[a-z][a-zA-Z0-9]*",
    "pascal": r"[A-Z][a-zA-Z0-9]*",
    "snake": r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*",
}
NAME_EXAMPLE = {
    "upper": ("maxSize", "MAX_SIZE"),
    "camel": ("max_size", "maxSize"),
    "pascal": ("maxSize", "MaxSize"),
    "snake": ("maxSize", "max_size"),
}
# Declarations by kind of identifier: (files, the text before the name, a template of one
# declaration with {name}).
DECLARATIONS: dict[str, list[tuple[list[str], str, str]]] = {
    "constant": [
        (JS, r"^(?:export\s+)?const\s+", "export const {name} = 10;\n"),
        (["*.py"], r"^(?!__)(?=\w+\s*(?::[^=\n]+)?=\s*(?:-?\d|[\"']))", "{name} = 10\n"),
        (["*.rs"], r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const|static)\s+", "const {name}: u32 = 10;\n"),
        (["*.java", "*.kt", "*.cs"], r"\b(?:static\s+final\s+[\w<>\[\]]+|const\s+val|const\s+\w+)\s+",
         "static final int {name} = 10;\n"),
    ],
    "function": [
        (JS, r"\bfunction\s+", "function {name}() {{}}\n"),
        (["*.py"], r"^\s*(?:async\s+)?def\s+(?!__)", "def {name}():\n    pass\n"),
        (["*.go"], r"^func\s+(?:\([^)]*\)\s*)?", "func {name}() {{}}\n"),
        (["*.rs"], r"\bfn\s+", "fn {name}() {{}}\n"),
    ],
    "class": [
        ([*JS, "*.py", "*.java", "*.kt", "*.cs", "*.swift", "*.dart", "*.php", "*.rb"],
         r"^\s*(?:export\s+)?(?:default\s+)?(?:abstract\s+|public\s+|final\s+|data\s+)*(?:class|interface|enum|struct|trait)\s+",
         "class {name} {{}}\n"),
        (["*.ts", "*.tsx"], r"^\s*(?:export\s+)?type\s+(?=\w+\s*=)", "type {name} = string;\n"),
        (["*.go"], r"^type\s+", "type {name} struct{{}}\n"),
        (["*.rs"], r"^\s*(?:pub\s+)?(?:struct|enum|trait)\s+", "struct {name};\n"),
    ],
    "variable": [
        (JS, r"\b(?:let|var|const)\s+(?![A-Z][A-Z0-9_]*\s*=)", "let {name} = 1;\n"),
        (["*.py"], r"^\s+(?=\w+\s*=[^=])", "def f():\n    {name} = 1\n"),
    ],
    "component": [
        (["*.jsx", "*.tsx"], r"^export\s+(?:default\s+)?(?:function|const|class)\s+(?!use[A-Z])",
         "export function {name}() {{\n  return null;\n}}\n"),
    ],
    "export": [
        (JS, r"^export\s+(?:default\s+)?(?:async\s+)?(?:function|class|const|let|interface|type|enum)\s+",
         "export function {name}() {{}}\n"),
    ],
}  # fmt: skip
KIND_WORDS = {
    "constant": r"constants?",
    "function": r"functions?|methods?",
    # "Enum values are UPPER_CASE" names the members, not the enum.
    "class": r"class(?:es)?|types?|interfaces?|enums?(?!\s+(?:values?|members?|cases?|keys?|variants?))|structs?",
    "variable": r"variables?|locals?",
    "export": r"exports?|exported (?:names?|symbols?|functions?|members?)",
    "component": r"components?(?: names?)?",
}
_ADJ = (
    r"(?:(?:all|the|our|exported|public|private|global|module[- ]level|top[- ]level|local|new|"
    r"react|python|typescript|javascript|ts|js|go|rust|java|kotlin|swift|dart|ruby|php|c#|"
    r"and|or|,|&|/)\s*)*"
)


def _kinds_named(span: str) -> list[str]:
    return [k for k, rx in KIND_WORDS.items() if re.search(rf"\b(?:{rx})\b", span, re.I)]


def identifier_naming_shapes(text: str) -> list[Shaped]:
    """ "Constants are UPPER_SNAKE_CASE", "use camelCase for functions and variables",
    "exported names in PascalCase": declarations whose name breaks the case are blocked."""
    out: list[Shaped] = []
    kinds_rx = "|".join(KIND_WORDS.values())
    langs = [g for g in languages_of(text) if g.startswith("*.")]
    for case, case_rx in CASE_NAMES.items():
        for cm in re.finditer(case_rx, text, re.I):
            before, after = text[: cm.start()], text[cm.end() :]
            for_kinds = re.match(
                rf"\s+(?:for|on)\s+{_ADJ}((?:(?:{kinds_rx})\b{_ADJ})+)", after, re.I
            )
            kinds_first = re.search(
                # No comma or other clause between: "constants in X, functions in Y".
                rf"((?:\b(?:{kinds_rx})\b{_ADJ})+)[^.;:,]{{0,40}}?(?:\b(?:use|uses|are|is|in|be|follow|:)\b|:)"
                r"\s*(?:\w+\s+)?`?$",
                before,
                re.I,
            )
            span = for_kinds.group(1) if for_kinds else kinds_first.group(1) if kinds_first else ""
            for kind in _kinds_named(span):
                out.extend(_declaration_shapes(kind, case, langs))
    return out


def _declaration_shapes(kind: str, case: str, langs: list[str]) -> list[Shaped]:
    out = []
    bad_name, good_name = NAME_EXAMPLE[case]
    for files, prefix, template in DECLARATIONS[kind]:
        if langs and not set(files) & set(langs):
            continue
        name = rf"(?!_*(?:{NAME_RE[case]})_*(?![\w$]))[A-Za-z_$][\w$]*"
        rule = ContentRule(pattern=prefix + name, path_globs=files)
        path = "src/example" + files[0][1:]
        out.append(
            write_pair(rule, path, template.format(name=bad_name), template.format(name=good_name))
        )
    return out


BOOL_DECL = (
    r"\b(?:const|let|var|val|final|bool|boolean|Bool)\s+(?!{prefix})(?![A-Z][A-Z0-9_]*\b)"
    r"[A-Za-z_$][\w$]*\s*(?::\s*(?:boolean|Boolean|Bool|bool)\s*)?=\s*(?:true|false)\b"
    r"|^\s*(?!{prefix_py})[a-z_]\w*\s*(?::\s*bool\s*)?=\s*(?:True|False)\b"
)


def boolean_prefix_shapes(text: str) -> list[Shaped]:
    """ "Prefix booleans with `is`/`has`", "use `is` prefix for state: `isLoading`"."""
    t = text
    prefixes = [p for p in backticked(t) if re.fullmatch(r"[a-z]{2,6}", p)]
    if not prefixes or not re.search(r"\bprefix\w*|\bstart with\b|\bbegin with\b", t, re.I):
        return []
    examples = [b for b in backticked(t) if re.fullmatch(r"[a-z]{2,6}[A-Z]\w*", b)]
    booleanish = re.search(r"\bbool(?:ean)?s?\b|\bflags?\b", t, re.I)
    if not booleanish and not (
        len(examples) >= 2 and all(any(e.startswith(p) for p in prefixes) for e in examples)
    ):
        return []
    alt = "|".join(map(re.escape, prefixes))
    pattern = BOOL_DECL.format(prefix=rf"(?:{alt})[A-Z0-9]", prefix_py=rf"(?:{alt})_")
    rule = ContentRule(pattern=pattern, path_globs=CODE_FILES)
    good = f"const {prefixes[0]}Loading = false;\n"
    return [write_pair(rule, "src/a.ts", "const loading = false;\n", good)]


# -- formatting of lines ------------------------------------------------------------------------


def line_format_shapes(text: str) -> list[Shaped]:
    """Line length, trailing whitespace, a final newline, TODO markers, semicolons."""
    t = text
    out: list[Shaped] = []
    langs = [g for g in languages_of(t) if g.startswith("*.")] or CODE_FILES
    path = "src/example" + langs[0][1:]
    m = re.search(
        r"\blines?\b[^.]*?\b(?:under|at most|no more than|max(?:imum)?(?: of)?|exceed\w*|"
        r"longer than|more than|fewer than|less than|within|over)\s+(\d{2,3})\s*"
        r"(?:char\w*|columns?|cols)\b"
        r"|\b(?:max(?:imum)?[- ])?line[- ](?:length|width)\b(?:\s+(?:limit|of|is|:|=))*\s*(\d{2,3})\b",
        t,
        re.I,
    )
    if m and re.search(
        r"\b(must|should|never|keep|no|max\w*|limit|exceed\w*|under|at most)\b", t, re.I
    ):
        n = int(m.group(1) or m.group(2))
        rule = ContentRule(pattern=rf"^[^\n]{{{n + 1},}}$", path_globs=langs)
        out.append(write_pair(rule, path, "x" * (n + 1) + "\n", "x\n"))
    if forbids(t, r"[^.]*\btrailing (?:white ?space|spaces)\b") or re.search(
        r"\b(?:strip|remove|trim)\s+(?:all\s+)?trailing (?:white ?space|spaces)\b", t, re.I
    ):
        rule = ContentRule(pattern=r"[ \t]+$")
        out.append(write_pair(rule, path, "x = 1  \n", "x = 1\n"))
    if re.search(
        r"\bfiles?\b[^.]*\b(?:end|ends|ending)\s+with\s+(?:a\s+|one\s+)?(?:single\s+)?(?:newline|new line|line break)"
        r"|\b(?:final|trailing)\s+newline\b",
        t,
        re.I,
    ) and not forbids(t, r"\s+(?:\w+\s+)?(?:final|trailing)\s+newline"):
        rule = ContentRule(pattern=r"\n\Z", required=True)
        out.append(write_pair(rule, path, "x = 1", "x = 1\n"))
    todo = re.search(r"\b(TODO|FIXME|XXX|HACK)s?\b", t)
    if todo and re.search(NEG, t, re.I) and not re.search(r"\b(without|unless|except)\b", t, re.I):
        rule = ContentRule(pattern=rf"\b{todo.group(1)}\b")
        out.append(write_pair(rule, path, f"x = 1  # {todo.group(1)}: later\n", "x = 1\n"))
    if re.search(
        NEG + r"\s+(?:use\s+|add\s+)?(?:any\s+)?semicolons\b|\bomit\s+semicolons\b", t, re.I
    ):
        rule = ContentRule(pattern=r";[ \t]*$", path_globs=JS)
        out.append(write_pair(rule, "src/a.js", "const a = 1;\n", "const a = 1\n"))
    return out


# Declaring or assigning a global, per language: (files, pattern, a violation, compliant).
GLOBAL_WRITES = [
    (["*.py"], r"^\s*global\s+\w", "def f():\n    global count\n", "def f():\n    count = 0\n"),
    (JS, r"\b(?:window|globalThis|global)\.[A-Za-z_$][\w$]*\s*=(?!=)", "window.cache = {};\n",
     "const cache = {};\n"),
    (["*.lua"], r"^(?!local\b)(?:function\s+[A-Za-z_]\w*\s*\(|[A-Za-z_]\w*\s*=(?!=))",
     "count = 0\n", "local count = 0\n"),
    (["*.go"], r"^var\s+", "var count int\n", "const limit = 3\n"),
    (["*.rs"], r"^\s*(?:pub\s+)?static\s+mut\b", "static mut COUNT: u32 = 0;\n",
     "const LIMIT: u32 = 3;\n"),
]  # fmt: skip


def global_shapes(text: str) -> list[Shaped]:
    """ "No new globals", "never use global variables": no code declares or assigns one."""
    what = r"\s+(?:(?:use|add|introduce|create|define)\s+)?(?:any\s+)?(?:new\s+|mutable\s+)?"
    if not forbids(text, what + r"(?:globals|global variables?)\b"):
        return []
    langs = [g for g in languages_of(text) if g.startswith("*.")]
    out = []
    for files, pattern, bad, good in GLOBAL_WRITES:
        if langs and not set(files) & set(langs):
            continue
        path = "src/example" + files[0][1:]
        rule = ContentRule(pattern=pattern, path_globs=files)
        out.append(write_pair(rule, path, bad, good))
    return out


# An assignment with a plain `=` at the start of a line (not `==`, `:=`, `<-`, `=>`, `+=`).
PLAIN_ASSIGNMENT = r"^\s*[A-Za-z_][\w.$]*(?:\[[^\]\n]*\])?\s*=(?![=>~])"


def operator_shapes(text: str) -> list[Shaped]:
    """ "Use `<-` for assignment, not `=`", "`:=` for all assignments (never `=`)"."""
    m = re.search(
        r"\buse\s+`(?P<op>:=|<-)`\s+(?:for\s+)?(?:all\s+)?assignments?\b"
        r"|\bassignments?\b[^.]*\b(?:use|with)\s+`(?P<op2>:=|<-)`",
        text,
        re.I,
    )
    if not m or not re.search(
        NEG + r"|\binstead of\b|\brather than\b|\bover\b|\ball\b", text, re.I
    ):
        return []
    op = m.group("op") or m.group("op2")
    langs = [g for g in languages_of(text) if g.startswith("*.")]
    rule = ContentRule(pattern=PLAIN_ASSIGNMENT, path_globs=langs)
    path = "src/example" + (langs[0][1:] if langs else ".txt")
    return [write_pair(rule, path, "total = 1\n", f"total {op} 1\n")]


# A getter whose body is one `return` ("get x { return _x; }"): an expression body says it
# in one line ("get x => _x;").
GETTER_BLOCK = r"\bget\b\s*(?:\w+\s*)?(?:\(\s*\))?\s*\{\s*return\b[^;{}]*;?\s*\}"


def expression_body_shapes(text: str) -> list[Shaped]:
    """ "Prefer expression bodies for one-line getters", "use expression-bodied members"."""
    if not re.search(r"\bexpression[- ]bod(?:y|ies|ied)\b|`=>`\s+(?:for|in)\s+getters", text, re.I):
        return []
    if not re.search(r"\b(getters?|properties|members|accessors)\b", text, re.I) or negated(
        text, "expression"
    ):
        return []
    langs = [g for g in languages_of(text) if g.startswith("*.")]
    rule = ContentRule(pattern=GETTER_BLOCK, path_globs=langs or ["*.dart", "*.cs", "*.kt"])
    path = "lib/example" + (langs[0][1:] if langs else ".dart")
    return [
        write_pair(
            rule, path, "int get count {\n  return _count;\n}\n", "int get count => _count;\n"
        )
    ]


# -- imports -------------------------------------------------------------------------------------

RELATIVE_IMPORT = (
    r"^\s*(?:from\s+\.+[\w.]*\s+import\b|import\b[^'\"\n]*\bfrom\s+['\"]\.{1,2}/"
    r"|(?:import|export)\s+['\"]\.{1,2}/|.*\brequire\(\s*['\"]\.{1,2}/)"
)
DEEP_RELATIVE_IMPORT = r"['\"](?:\.\./){2,}"


def relative_import_shapes(text: str) -> list[Shaped]:
    """ "Use absolute imports, not relative ones", "no `../../` imports"."""
    t = text
    deep = re.search(
        r"`?\.\./\.\./|\bparent director|\bdeep(?:ly)? (?:nested )?relative|\bmore than one level",
        t,
        re.I,
    )
    # "Use absolute imports with path aliases for cleaner code" is advice; "always use
    # absolute imports" and "absolute imports, not relative ones" are rules.
    wants_absolute = re.search(
        r"\b(?:always|only)\s+(?:use\s+)?absolute imports?\b"
        r"|\babsolute imports?\b[^.]*\b(?:over|instead of|rather than|not)\s+relative\b",
        t,
        re.I,
    )
    # "Never import from `../../`": the relative path itself named.
    named_parent = forbids(t, r"\s+import\s+(?:from\s+)?`(?:\.\./)+`")
    no_relative = (
        named_parent
        or forbids(t, r"\s+(?:use\s+)?(?:any\s+)?(?:deep\s+)?relative imports?\b")
        or re.search(
            r"\brelative imports?\b[^.]*\b(?:are\s+)?(?:not allowed|forbidden|banned)", t, re.I
        )
    )
    if not (wants_absolute or no_relative):
        return []
    if deep:
        rule = ContentRule(pattern=DEEP_RELATIVE_IMPORT, path_globs=JS)
        return [
            write_pair(
                rule,
                "src/a/b.ts",
                "import { x } from '../../lib/x';\n",
                "import { x } from '@/lib/x';\n",
            )
        ]
    rule = ContentRule(pattern=RELATIVE_IMPORT, path_globs=[*JS, "*.py"])
    return [
        write_pair(
            rule, "src/a/b.ts", "import { x } from '../lib/x';\n", "import { x } from '@/lib/x';\n"
        )
    ]


def folder_access_shapes(text: str) -> list[Shaped]:
    """ "No direct DB access (`sqlalchemy`/`psycopg`) in views": those modules are not
    imported in that kind of folder."""
    out: list[Shaped] = []
    for m in re.finditer(
        NEG + r"\s+(?:direct\s+)?(?:[\w-]+\s+){0,2}(?:access|calls?|imports?|usage|use|queries)\s*"
        r"\((?P<mods>[^)]+)\)\s+(?:in|from|inside|within)\s+(?:the\s+)?(?:any\s+)?`?(?P<where>[\w/-]+)`?",
        text,
        re.I,
    ):
        mods = [
            x.strip().strip("`").lower() for x in re.split(r"[/,]|\bor\b|\band\b", m.group("mods"))
        ]
        mods = [x for x in mods if re.fullmatch(r"[@\w.-]{2,}(?:/[\w.-]+)?", x)]
        where = m.group("where").strip("/")
        if not mods:
            continue
        globs = [f"**/{where}/**", f"**/{where}.*"]
        pattern = "|".join(f"(?:{import_re(x)})" for x in mods)
        rule = ContentRule(pattern=pattern, path_globs=globs)
        path = f"src/{where}/a.ts"
        out.append(
            write_pair(
                rule,
                path,
                f"import {{ db }} from '{mods[0]}';\n",
                "import { useThing } from '../hooks/useThing';\n",
            )
        )
    return out


CONVENTION_SHAPES: list[Callable[[str], list[Shaped]]] = [
    keep_shapes,
    co_requirement_shapes,
    identifier_naming_shapes,
    boolean_prefix_shapes,
    line_format_shapes,
    operator_shapes,
    expression_body_shapes,
    global_shapes,
    relative_import_shapes,
    folder_access_shapes,
]
