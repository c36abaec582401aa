"""What every shape family shares: the `Probe`/`Shaped` pair, the calls a self-check is
built from, the readers that pull globs, languages and backticked names out of a rule, and
the vocabulary of software work (languages, file types, formatters, git, package
managers), never a project's own names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from continual_lsp.lanes.features import FILE_TYPES, KNOWN_FILES, PATHISH
from continual_lsp.lanes.guards.spec import Rule
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


def write_probe(path: str, content: str) -> Probe:
    return Probe(ToolCall(tool="write", arguments={"path": path, "content": content}))


def bash_probe(cmd: str, history: list[ToolCall] | None = None) -> Probe:
    return Probe(ToolCall(tool="bash", arguments={"cmd": cmd}), history or [])


def write_pair(rule: Rule, path: str, violating: str, compliant: str) -> Shaped:
    """The most common self-check: one file written against the rule, then within it."""
    return Shaped(rule, write_probe(path, violating), write_probe(path, compliant))


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


def backticked(text: str) -> list[str]:
    return [m.strip() for m in re.findall(r"`([^`]+)`", text)]


def globs_of(text: str) -> list[str]:
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


def languages_of(text: str) -> list[str]:
    globs: list[str] = []
    for raw in re.findall(r"[\w#+]+", text):
        if raw == "go":
            continue  # the verb ("never go over 100 characters"); the language is "Go"
        word = raw.lower()
        for g in LANG_GLOBS.get(word, []) + ([FILE_TYPES[word]] if word in FILE_TYPES else []):
            if g not in globs:
                globs.append(g)
    return globs


def example_path(globs: list[str], default: str) -> str:
    for g in globs:
        if g.startswith("*.") and "*" not in g[1:]:
            return "src/example" + g[1:]
        if g.endswith("/**") and "*" not in g[:-3]:
            return g[:-2] + "example" + default[default.rfind(".") :]
    return default


def import_re(module: str) -> str:
    m = re.escape(module.strip("/").replace("/", "."))
    slash = re.escape(module.strip("/"))
    # The module anywhere in a path or dotted name: `'../db/x'`, `'@/db'`, `from app.db import`.
    return (
        rf"^\s*(?:import\s+(?:[\w.]*\.)?{m}\b|from\s+(?:[\w.]*\.)?{m}\b|"
        rf"import\b.*\bfrom\s+['\"](?:[^'\"\s]*/)?{slash}\b|"
        rf".*\brequire\(['\"](?:[^'\"\s]*/)?{slash}\b|use\s+(?:\w+::)*{m}\b)"
    )


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


def negated(t: str, word: str) -> bool:
    """`word` sits right after a negation ("don't use pnpm", "no docstrings")."""
    return forbids(t, r"\s+(?:\w+\s+){0,2}`?" + re.escape(word))
