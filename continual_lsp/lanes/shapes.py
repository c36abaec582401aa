"""Rule shapes the guard compiler knows, each with the self-check that proves its guard.

A shape reads one general form of rule ("no default exports", "after changing X run Y",
"commit messages follow Conventional Commits", "`client/` never imports `server/`") and
returns the declarative rule together with two situations it synthesises: one that
violates the rule and one that complies. `compile.compile_guard` keeps a rule only when
its guard fires on the first and lets the second through, so a CODE decision always
names a guard that has been seen to work.

The vocabulary is the general vocabulary of software work (languages, file types,
formatters, git), never a project's own names.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from continual_lsp.lanes.features import FILE_TYPES, KNOWN_CLI, PATHISH, is_commandish
from continual_lsp.lanes.guards import (
    CommandRule,
    CommitMessageRule,
    ContentRule,
    Guard,
    GuardSpec,
    NamingRule,
    PathRule,
    Rule,
    SequenceRule,
)
from continual_lsp.tools.base import ToolCall


@dataclass
class Situation:
    call: ToolCall
    history: list[ToolCall] = field(default_factory=list)


@dataclass
class Shaped:
    rule: Rule
    violating: Situation
    compliant: Situation


def passes_self_check(shaped: Shaped) -> bool:
    """The rule's guard blocks the violating situation and allows the compliant one."""
    guard = Guard("self-check", GuardSpec(message="self-check", rules=[shaped.rule]))
    bad = guard.check(shaped.violating.call, None, shaped.violating.history)
    good = guard.check(shaped.compliant.call, None, shaped.compliant.history)
    return bad.action == "block" and good.action == "allow"


def _write(path: str, content: str) -> Situation:
    return Situation(ToolCall(tool="write", arguments={"path": path, "content": content}))


def _bash(cmd: str, history: list[ToolCall] | None = None) -> Situation:
    return Situation(ToolCall(tool="bash", arguments={"cmd": cmd}), history or [])


NEG = r"\b(?:never|no|not|don'?t|do not|avoid|must not|mustn'?t|should not|without)\b"
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


def _languages(text: str) -> list[str]:
    globs: list[str] = []
    for word in re.findall(r"[\w#+]+", text.lower()):
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
    out: list[Shaped] = []

    def deny(pattern: str, globs: list[str], bad: str, good: str, path: str) -> None:
        rule = ContentRule(pattern=pattern, path_globs=globs)
        out.append(Shaped(rule, _write(path, bad), _write(path, good)))

    if re.search(r"\bnamed exports?\b", t, re.I) or re.search(
        NEG + r"[^.]*\bdefault exports?", t, re.I
    ):
        deny(
            r"^\s*export\s+default\b",
            JS,
            "export default function f() {}\n",
            "export function f() {}\n",
            "src/example.ts",
        )
    if re.search(NEG + r"[^.]*\b(emojis?|emoji)\b", t, re.I):
        out.append(
            Shaped(
                ContentRule(pattern=EMOJI),
                _write("src/a.py", "x = 1  # \u2705\n"),
                _write("src/a.py", "x = 1\n"),
            )
        )
        if re.search(r"\bcommit", t, re.I):
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
        deny(r"^\t+", [], "def f():\n\treturn 1\n", "def f():\n    return 1\n", "src/a.py")
    if re.search(NEG + r"[^.]*\binline[- ]styles?\b", t, re.I):
        deny(
            r"\bstyle\s*=\s*[\"'{]",
            MARKUP,
            '<div style="color: red">x</div>\n',
            '<div class="warn">x</div>\n',
            "src/example.html",
        )
    if re.search(NEG + r"[^.]*\bvar\b", t, re.I) and re.search(r"\b(const|let|var)\b", t):
        deny(r"^\s*var\s", JS, "var x = 1;\n", "const x = 1;\n", "src/example.js")
    if re.search(
        NEG + r"[^.]*(?:\bprint\(\)|`print`|\bprint\s+statements?\b)", t, re.I
    ) or re.search(r"\b(logging|logger)\b[^.]*\binstead of\s+`?print", t, re.I):
        langs = _languages(t) or ["*.py"]
        deny(
            r"^\s*print\(",
            langs,
            "print('debug')\n",
            "log.info('debug')\n",
            _example_path(langs, "src/example.py"),
        )
    if re.search(NEG + r"[^.]*\bdebugger\b", t, re.I):
        deny(r"^\s*debugger;?\s*$", JS, "debugger;\n", "const x = 1;\n", "src/example.js")
    if re.search(r"\bimport\s+logging\b|\bstdlib\s+`?logging", t, re.I) and re.search(
        r"\bNOT\b|\bnot\b|never", t
    ):
        deny(
            r"^\s*(import logging\b|from logging import)",
            ["*.py"],
            "import logging\n",
            "import structlog\n",
            "src/example.py",
        )
    if re.search(r"\bunresolved placeholders?\b", t, re.I):
        deny(r"\{\{\s*[A-Za-z_]\w*\s*\}\}", [], "Hello {{NAME}}\n", "Hello Ada\n", "docs/a.md")
    if re.search(r"\bwildcard imports?\b|\bstar imports?\b|\bexplicit imports?\b", t, re.I):
        deny(
            r"^\s*from\s+\S+\s+import\s+\*",
            ["*.py"],
            "from os import *\n",
            "from os import path\n",
            "src/example.py",
        )
    if re.search(r"`\.then\(\)`|\braw\s+`?\.then\b", t, re.I) and re.search(NEG, t, re.I):
        deny(r"\.then\(", JS, "f().then(g);\n", "await f();\n", "src/example.ts")
    # "don't use raw `<img>` tags", "no inline `<script>` tags in `index.html`".
    for m in re.finditer(NEG + r"[^.]*?(?P<inline>\binline\s+)?`<(?P<tag>[a-z][\w-]*)>`", t, re.I):
        tag = m.group("tag").lower()
        inline = r"(?![^>]*\bsrc\s*=)" if m.group("inline") and tag == "script" else ""
        named = [
            g for g in _globs(t) if g.rsplit(".", 1)[-1] in ("html", "twig", "vue", "tsx", "jsx")
        ]
        globs = named or MARKUP
        path = named[0] if named else "src/example.html"
        deny(rf"<{tag}\b{inline}", globs, f"<{tag}>x</{tag}>\n", "<div>x</div>\n", path)
    if re.search(r"\bdouble quotes? for (?:html )?attributes\b", t, re.I):
        deny(r"\s[\w:-]+='", MARKUP, "<a href='/x'>x</a>\n", '<a href="/x">x</a>\n', "a.html")
    out.extend(_required_text(t))
    out.extend(_import_boundaries(t))
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
    return [Shaped(rule, _write("src/a.py", "x = 1\n"), _write("src/a.py", f"# {needle}\nx = 1\n"))]


def _import_re(module: str) -> str:
    m = re.escape(module.strip("/").replace("/", "."))
    slash = re.escape(module.strip("/"))
    return (
        rf"^\s*(?:import\s+{m}\b|from\s+{m}\b|import\b.*\bfrom\s+['\"](?:\.{{1,2}}/)*{slash}\b|"
        rf".*\brequire\(['\"](?:\.{{1,2}}/)*{slash}\b|use\s+{m}\b)"
    )


def _import_boundaries(t: str) -> list[Shaped]:
    """ "never import `X` (directly)( in `P`)", "`A/` never imports `B/`"."""
    out: list[Shaped] = []
    for m in re.finditer(
        r"(?:`(?P<src>[\w./-]+)`|(?P<srcw>\b\w+)\s+(?:code|files?))\s+(?:must\s+|should\s+)?"
        r"(?:never|not|must not|does not|do not|cannot)\s+imports?\s+(?:from\s+)?"
        r"(?:`(?P<dst>[\w./@-]+)`|(?P<dstw>\w+)\s+code)",
        t,
        re.I,
    ):
        src = m.group("src") or m.group("srcw").lower()
        dst = m.group("dst") or m.group("dstw").lower()
        globs = [src.rstrip("/") + "/**"]
        rule = ContentRule(pattern=_import_re(dst), path_globs=globs)
        path = src.rstrip("/") + "/a.ts"
        out.append(
            Shaped(
                rule,
                _write(path, f"import {{ x }} from '../{dst}/x';\n"),
                _write(path, "import { x } from './x';\n"),
            )
        )
    for m in re.finditer(
        NEG + r"\s+import\s+(?:`(?P<mods>[^`]+)`|(?P<word>\w+))(?:\s+or\s+`(?P<mods2>[^`]+)`)?"
        r"(?:\s+directly)?(?:\s+(?:in|from|inside)\s+(?P<where>[\w`./-]+))?",
        t,
        re.I,
    ):
        mods = [x for x in (m.group("mods"), m.group("mods2"), m.group("word")) if x]
        mods = [
            x
            for x in mods
            if re.fullmatch(r"[\w./@-]+", x) and x.lower() not in ("it", "them", "anything")
        ]
        if not mods:
            continue
        where = (m.group("where") or "").strip("`")
        globs = [where.rstrip("/") + "/**"] if "/" in where else []
        owner = [g for g in _globs(t) if g not in globs and "." in g.rsplit("/", 1)[-1]]
        pattern = "|".join(f"(?:{_import_re(x)})" for x in mods)
        rule = ContentRule(pattern=pattern, path_globs=globs, exclude_globs=owner)
        path = (where.rstrip("/") + "/a.py") if globs else "src/a.py"
        out.append(
            Shaped(
                rule,
                _write(path, f"import {mods[0].replace('/', '.')}\n"),
                _write(path, "import json\n"),
            )
        )
    return out


# -- commands, git, sequences ----------------------------------------------------------------


def git_shapes(text: str) -> list[Shaped]:
    t = text
    out: list[Shaped] = []
    if re.search(r"\bconventional[- ]commits?\b", t, re.I) or (
        re.search(r"\bcommit", t, re.I) and re.search(r"`?\b(feat|fix)(\([^)]*\))?:", t)
    ):
        rule = CommitMessageRule(pattern=CONVENTIONAL, must_match=True)
        out.append(
            Shaped(
                rule,
                _bash("git commit -m 'updated stuff'"),
                _bash("git commit -m 'fix: handle empty input'"),
            )
        )
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
        globs += {
            "excel": ["*.xlsx", "*.xls"],
            "secrets": [".env"],
            "binaries": ["*.exe", "*.bin"],
        }.get(next((w for w in ("excel", "secrets", "binaries") if w in what.lower()), ""), [])
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


def _step_command(token: str) -> str | None:
    token = token.strip().rstrip(".")
    if token and (
        is_commandish(token) or token.split()[0].lower() in FORMATTERS or "/" in token.split()[0]
    ):
        return token
    return None


def _step_regex(step: str) -> str:
    words = step.replace("...", "").split()
    return r"(^|\s)" + r"\s+".join(re.escape(w) for w in words[:3]) + r"(?![\w-])"


def sequence_shapes(text: str) -> list[Shaped]:
    """ "after changing X run `Y`", "run `Y` before every commit", "use `fmt` for formatting"."""
    t = text
    out: list[Shaped] = []

    def add(step: str, before: str, globs: list[str]) -> None:
        rule = SequenceRule(command=_step_regex(step), step=step, before=before, after_globs=globs)
        path = _example_path(globs, "src/example.py")
        change = ToolCall(tool="write", arguments={"path": path, "content": "x\n"})
        ran = ToolCall(tool="bash", arguments={"cmd": step})
        commit = "git commit -m 'fix: x'"
        out.append(Shaped(rule, _bash(commit, [change]), _bash(commit, [change, ran])))

    commit_trigger = re.search(
        r"\b(before|prior to)\s+(?:every\s+|each\s+|any\s+)?(?:git\s+)?commit|\bon every commit|\bpre-?commit\b",
        t,
        re.I,
    )
    change_trigger = re.search(
        r"\b(after|whenever|every time|each time|once)\b[^.]*\b(chang|edit|modif|writ|touch|complet|implement)\w*"
        r"|\bon (?:any|every|each) (?:\w+ )?(?:file )?(?:you )?(?:change|edit)|\bany \w+ files? you edit\b",
        t,
        re.I,
    )
    runs = re.search(r"\b(run|execute|use|verify with|check with|invoke)\b", t, re.I)
    steps = [s for s in (_step_command(b) for b in _backticked(t)) if s]
    if re.search(r"\bpre-commit\b", t, re.I) and re.search(r"\brun\b", t, re.I) and not steps:
        steps = ["pre-commit run"]
    if (
        not steps
        and re.search(r"\b(unit )?tests?\b", t, re.I)
        and runs
        and (commit_trigger or change_trigger)
    ):
        steps = ["test"]
        if commit_trigger or change_trigger:
            rule = SequenceRule(
                command=r"\b(test|tests|pytest|jest|vitest|unittest)\b",
                step="the test suite",
                before="commit",
                after_globs=[],
            )
            change = ToolCall(tool="write", arguments={"path": "src/a.py", "content": "x\n"})
            ran = ToolCall(tool="bash", arguments={"cmd": "npm test"})
            out.append(
                Shaped(
                    rule,
                    _bash("git commit -m 'fix: x'", [change]),
                    _bash("git commit -m 'fix: x'", [change, ran]),
                )
            )
            return out
    if steps and runs and (commit_trigger or change_trigger):
        add(steps[0], "commit", _languages(t))
        return out
    # "Use `rustfmt` for code formatting", "run `gofmt` on any Go file you edit".
    for name, globs in FORMATTERS.items():
        if (
            re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", t, re.I)
            and re.search(r"\b(format\w*|lint\w*|edit|run)\b", t, re.I)
            and re.search(r"\b(always|must|should|use|every|any|each|before|after)\b", t, re.I)
            and not re.search(NEG + r"\s+(?:run|use)\s+`?" + re.escape(name), t, re.I)
        ):
            add(name, "commit", globs)
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


def path_shapes(text: str) -> list[Shaped]:
    """ "`src/ui/` is generated, do not hand-edit", "Avoid: `*.Designer.cs` (auto-generated)"."""
    t = text
    if not (
        re.search(r"\b(do not|don'?t|never)\s+(hand[- ]?)?(edit|modify|write|touch)\b", t, re.I)
        or re.search(r"\bhand[- ]?(edit|writ)\w*\b", t, re.I)
        or (re.search(r"\bavoid\b", t, re.I) and re.search(r"\bgenerated\b", t, re.I))
    ):
        return []
    globs = [g for g in _globs(t) if not g.startswith(("http", "npx"))]
    globs += [g for g in _backticked(t) if g.startswith("*.") and g not in globs]
    if not globs:
        return []
    # With several paths, the one the prohibition governs comes last ("`src/components/`
    # (app), `src/components/ui/` (do not hand-edit)"); a backticked path is the named one.
    ticked = [g for g in globs if f"`{g.removesuffix('**')}`" in t or f"`{g}`" in t]
    last = (ticked or globs)[-1:]
    target = last if len(globs) > 1 and not re.search(r"\bavoid\b", t, re.I) else globs
    rule = PathRule(globs=target)
    inside = _example_path(target, "x.txt").replace("**", "x")
    inside = inside if "*" not in inside else inside.replace("*", "x")
    return [Shaped(rule, _write(inside, "x\n"), _write("elsewhere/ok.txt", "x\n"))]


SHAPES: list[Callable[[str], list[Shaped]]] = [
    content_shapes,
    git_shapes,
    sequence_shapes,
    naming_shapes,
    path_shapes,
]


def shaped_rules(text: str) -> list[Rule]:
    """The rules of every shape `text` has whose guard passes its self-check."""
    rules: list[Rule] = []
    for shape in SHAPES:
        for shaped in shape(text):
            if passes_self_check(shaped):
                rules.append(shaped.rule)
    return rules


__all__ = ["KNOWN_CLI", "SHAPES", "Shaped", "passes_self_check", "shaped_rules"]


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
    if isinstance(rule, PathRule) and rule.mode == "deny":
        tool = "write" if "write" in rule.tools else rule.tools[0]
        inside = rule.globs[0].replace("**", "x").replace("*", "x")
        call = ToolCall(tool=tool, arguments={"path": inside, "content": "x\n"})
        if tool != "write":
            return None
        return Shaped(rule, Situation(call), _write("elsewhere/ok.txt", "x\n"))
    if isinstance(rule, ContentRule) and not rule.required:
        literal = re.sub(r"\\b|\\w\*", "", rule.pattern)
        literal = re.sub(r"\\(.)", r"\1", literal)
        if not literal or re.search(r"[\[\](){}|^$+?]", literal.replace("()", "")):
            return None
        path = _example_path(rule.path_globs, "src/example.py")
        return Shaped(rule, _write(path, f"x = {literal}\n"), _write(path, "x = 1\n"))
    if isinstance(rule, SizeRule) and rule.max_lines is not None:
        return Shaped(
            rule, _write("src/a.py", "x\n" * (rule.max_lines + 1)), _write("src/a.py", "x\n")
        )
    if isinstance(rule, ToolRule) and rule.deny and not rule.existing_files_only:
        tool = rule.deny[0]
        args = {"cmd": "echo x"} if tool == "bash" else {"path": "a.txt", "content": "x"}
        other = "read" if tool != "read" else "glob"
        other_args = {"path": "a.txt"} if other == "read" else {"pattern": "*"}
        return Shaped(
            rule,
            Situation(ToolCall(tool=tool, arguments=args)),
            Situation(ToolCall(tool=other, arguments=other_args)),
        )
    return None


def fires(shaped: Shaped) -> bool:
    """Like `passes_self_check`, with a rewrite counting as firing (a substitution)."""
    guard = Guard("self-check", GuardSpec(message="self-check", rules=[shaped.rule]))
    bad = guard.check(shaped.violating.call, None, shaped.violating.history)
    good = guard.check(shaped.compliant.call, None, shaped.compliant.history)
    return bad.action in ("block", "rewrite") and good.action == "allow"
