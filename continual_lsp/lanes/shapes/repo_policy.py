"""Rule shapes of repository policy: how dependencies are added, build modes, git
actions written as noun phrases, the commit subject, lockfiles.

Like `conventions.py`: each shape reads a general English form of rule and returns
its declarative rule with a violating and a compliant situation; the compiler keeps the
rule only when its guard fires on the first and lets the second through.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from continual_lsp.lanes.guards.spec import (
    SEGMENT_START,
    CommandRule,
    CommitMessageRule,
    ContentRule,
    PathRule,
)
from continual_lsp.lanes.shapes.kit import (
    EMOJI,
    NEG,
    Shaped,
    bash_probe,
    forbids,
    negated,
    write_pair,
    write_probe,
)

# -- dependencies ---------------------------------------------------------------------------------

# A package manager's program -> (its manifest, a dependency line, a line that is not one).
MANIFEST_OF = {
    "npm": "package.json", "yarn": "package.json", "pnpm": "package.json", "bun": "package.json",
    "cargo": "Cargo.toml", "uv": "pyproject.toml", "poetry": "pyproject.toml",
    "pdm": "pyproject.toml", "dart": "pubspec.yaml", "flutter": "pubspec.yaml", "go": "go.mod",
    "composer": "composer.json", "bundle": "Gemfile", "dotnet": "*.csproj",
}  # fmt: skip
DEPENDENCY_LINES = {
    "package.json": (
        r"^\s*\"(?!version\"|name\")[@\w./-]+\"\s*:\s*\"(?:[\^~<>=*]|\d|workspace:|npm:|latest)",
        '    "left-pad": "^1.3.0",\n',
        '  "description": "a tool",\n',
    ),
    "composer.json": (
        r"^\s*\"[\w-]+/[\w.-]+\"\s*:\s*\"[\^~<>=*\d]",
        '    "monolog/monolog": "^3.0",\n',
        '  "description": "a tool",\n',
    ),
    "Cargo.toml": (
        r"^\s*(?!version\b|edition\b|rust-version\b|name\b)[\w-]+\s*=\s*(?:\"[\^~<>=]?\d|\{[^}\n]*\bversion\b)",
        'serde = "1.0"\n',
        'description = "a tool"\n',
    ),
    "pyproject.toml": (
        r"^\s*[\"'][A-Za-z][\w.-]*(?:\[[\w,]+\])?\s*(?:[<>=~!]=?[^\"'\n]*)?[\"'],?\s*$",
        '    "httpx>=0.27",\n',
        'description = "a tool"\n',
    ),
    "pubspec.yaml": (
        r"^\s+(?!sdk:|flutter:)[a-z_][a-z0-9_]*:\s*(?:[\"']?[\^~<>=]?\d|any\b)",
        "  http: ^1.2.0\n",
        "description: a tool\n",
    ),
    "go.mod": (
        r"^\s*(?:require\s+)?[\w.-]+\.[a-z]{2,}/\S+\s+v\d",
        "require github.com/pkg/errors v0.9.1\n",
        "go 1.22\n",
    ),
    "Gemfile": (r"^\s*gem\s+[\"']", "gem 'rails'\n", "source 'https://rubygems.org'\n"),
    "*.csproj": (
        r"<PackageReference\b",
        '<PackageReference Include="Serilog" Version="3.1.1" />\n',
        "<Nullable>enable</Nullable>\n",
    ),
}
# Commands that add a dependency (a bare `npm install` only installs the lockfile's).
ADD_DEPENDENCY = (
    SEGMENT_START + r"(?:(?:npm|pnpm|bun)\s+(?:install|i|add)(?:\s+-\S+)*\s+[^\s;&|-]"
    r"|yarn\s+add\b|pip3?\s+install(?:\s+-(?!r\b|e\b)\S+)*\s+(?!-)[^\s;&|.]"
    r"|uv\s+(?:add|pip\s+install)\b|(?:poetry|pdm|cargo|bundle)\s+add\b|go\s+get\b"
    r"|gem\s+install\b|composer\s+require\b|dotnet\s+add\s+(?:\S+\s+)?package\b"
    r"|(?:dart|flutter)\s+pub\s+add\b)"
)
DEPENDENCY_WORDS = r"(?:(?:new|any|additional|extra|third[- ]party|external)\s+)*(?:packages?|dependenc(?:y|ies)|deps|librar(?:y|ies)|crates|gems)"


def _manifest_shape(manifest: str) -> Shaped:
    pattern, dep, other = DEPENDENCY_LINES[manifest]
    path = manifest.replace("*", "App")
    rule = ContentRule(pattern=pattern, path_globs=[manifest])
    return write_pair(rule, path, dep, other)


def dependency_policy_shapes(text: str) -> list[Shaped]:
    """ "use `dart pub add` to install packages" (the manifest is not edited by hand for
    a dependency), "don't add dependencies without asking", "never install globally"."""
    t = text
    out: list[Shaped] = []
    m = re.search(
        r"\b(?:use|run|with|via|using|through)\s+`(?P<cmd>[^`]+)`[^.]*?\b(?:to\s+)?"
        r"(?:install|add|manage)\w*\s+" + DEPENDENCY_WORDS
        + r"|\b(?:install|add)\w*\s+" + DEPENDENCY_WORDS
        + r"\s+(?:only\s+)?(?:with|via|using|through)\s+`(?P<cmd2>[^`]+)`",
        t,
        re.I,
    )  # fmt: skip
    if m:
        cmd = m.group("cmd") or m.group("cmd2")
        manifest = MANIFEST_OF.get(cmd.split()[0].lower()) if cmd.split() else None
        if manifest and not negated(t, cmd):
            out.append(_manifest_shape(manifest))
    asks = re.search(
        r"\b(?:ask|approval|permission|confirm|check with)\w*\b[^.]*\bbefore\s+(?:adding|installing|introducing)\s+(?:a\s+|any\s+)?"
        + DEPENDENCY_WORDS,
        t,
        re.I,
    )
    banned = re.search(
        NEG + r"\s+(?:add|install|introduce|pull in)\w*\s+(?:a\s+)?" + DEPENDENCY_WORDS, t, re.I
    )
    # "… unless they pull their weight" leaves a judgement; "… without asking" is the gate.
    if banned and re.search(r"\b(unless|except|if|where)\b", t[banned.end() :], re.I):
        banned = None
    if asks or banned:
        rule = CommandRule(pattern=ADD_DEPENDENCY)
        out.append(
            Shaped(rule, bash_probe("cd web && npm install left-pad"), bash_probe("npm install"))
        )
        out.append(
            Shaped(rule, bash_probe("pip install requests"), bash_probe("pip install -r req.txt"))
        )
        for manifest in DEPENDENCY_LINES:
            out.append(_manifest_shape(manifest))
    if forbids(t, r"[^.]*\binstall\w*\b[^.]*\bglobal(?:ly)?\b") or re.search(
        NEG + r"[^.]*\bglobal\s+(?:installs?|packages?)\b", t, re.I
    ):
        rule = CommandRule(
            pattern=r"\b(?:npm|pnpm|bun)\s+(?:install|i|add)\b[^;&|]*\s(?:-g|--global)\b"
            r"|\byarn\s+global\s+add\b|\bsudo\s+(?:-\S+\s+)*(?:pip3?|npm|gem)\s+install\b"
        )
        out.append(
            Shaped(rule, bash_probe("npm i -g typescript"), bash_probe("npm i -D typescript"))
        )
    return out


# -- builds, git ------------------------------------------------------------------------------------

RELEASE_BUILD = r"(?<!\S)--release(?![\w-])|(?<!\S)(?:-c|--configuration)\s+Release\b"


def build_mode_shapes(text: str) -> list[Shaped]:
    """ "Use debug builds while iterating", "never build in release mode"."""
    t = text
    prefers_debug = re.search(r"\bdebug builds?\b", t, re.I) and re.search(
        r"\b(?:use|prefer|stick to|stay on|always)\b", t, re.I
    )
    no_release = forbids(t, r"\s+(?:\w+\s+){0,2}release (?:builds?|mode)\b")
    if not (prefers_debug or no_release):
        return []
    rule = CommandRule(pattern=RELEASE_BUILD)
    return [Shaped(rule, bash_probe("cargo build --release"), bash_probe("cargo build"))]


def no_git_action_shapes(text: str) -> list[Shaped]:
    """ "No commits, no pushes" written as noun phrases (the verb forms are compile's)."""
    out: list[Shaped] = []
    if re.search(r"\bno\s+(?:git\s+)?commits\b(?![- ](?:message|hook))", text, re.I):
        rule = CommandRule(pattern=SEGMENT_START + r"git\s+commit\b")
        out.append(
            Shaped(rule, bash_probe("git add -A && git commit -m x"), bash_probe("git status"))
        )
    if re.search(r"\bno\s+(?:git\s+)?push(?:es|ing)?\b", text, re.I):
        rule = CommandRule(pattern=SEGMENT_START + r"git\s+push\b")
        out.append(Shaped(rule, bash_probe("git push origin main"), bash_probe("git status")))
    return out


def commit_style_shapes(text: str) -> list[Shaped]:
    """Commit subject length, how it starts, no body. (The imperative mood is not here: no regex can tell
    "Added" from "Embed", so it stays a judgement.)"""
    t = text
    if not re.search(r"\bcommit", t, re.I):
        return []
    out: list[Shaped] = []
    m = re.search(
        r"\b(?:subject|summary|title|first line|header|messages?)\b[^.]*?\b(?:under|at most|no more than|"
        r"max(?:imum)?(?: of)?|within|fewer than|less than|exceed\w*|longer than|<=?)\s+(\d{2,3})\s*(?:char\w*|columns?)",
        t,
        re.I,
    )
    if m:
        n = int(m.group(1))
        rule = CommitMessageRule(pattern=rf"^[^\n]{{{n + 1},}}")
        out.append(
            Shaped(
                rule,
                bash_probe(f"git commit -m '{'x' * (n + 1)}'"),
                bash_probe("git commit -m 'fix: x'"),
            )
        )
    out.extend(_commit_start_shapes(t))
    if re.search(
        r"\bno (?:commit )?body\b|\bsingle[- ]line commit|\bone[- ]line commit|\bsubject(?: line)? only\b",
        t,
        re.I,
    ):
        rule = CommitMessageRule(pattern=r"\n\s*\S")
        out.append(
            Shaped(
                rule,
                bash_probe("git commit -m 'fix: x\n\nmore'"),
                bash_probe("git commit -m 'fix: x'"),
            )
        )
    return out


def _commit_start_shapes(t: str) -> list[Shaped]:
    """ "Commit messages start with a capital letter", "prefix commits with the ticket key"."""
    starts = re.search(
        r"\b(?:start|begin)s?\s+with\s+(?:an?\s+|the\s+)?(?P<what>capital|upper[- ]?case|"
        r"capitali[sz]ed|lower[- ]?case|gitmoji|emoji|(?:jira\s+|ticket\s+|issue\s+)+(?:number|id|key))"
        r"|\bprefix\w*\b[^.]*\bwith\s+(?:the\s+|a\s+)?"
        r"(?P<what2>(?:jira\s+|ticket\s+|issue\s+)+(?:number|id|key))",
        t,
        re.I,
    )
    if not starts:
        return []
    what = (starts.group("what") or starts.group("what2")).lower()
    if what.startswith("lower"):
        pattern, bad, good = r"^[a-z]", "Fix login", "fix login"
    elif what in ("gitmoji", "emoji"):
        pattern, bad, good = rf"^(?::\w+:|{EMOJI})", "fix login", ":bug: fix login"
    elif what.startswith(("capital", "upper")):
        pattern, bad, good = r"^[A-Z]", "fix login", "Fix login"
    else:
        pattern, bad, good = r"^\[?[A-Z][A-Z0-9]*-\d+\b", "fix login", "ABC-12: fix login"
    rule = CommitMessageRule(pattern=pattern, must_match=True)
    return [
        Shaped(rule, bash_probe(f"git commit -m '{bad}'"), bash_probe(f"git commit -m '{good}'"))
    ]


LOCKFILES = [
    "package-lock.json", "yarn.lock", "pnpm-lock.yaml", "bun.lockb", "Cargo.lock",
    "poetry.lock", "uv.lock", "Pipfile.lock", "Gemfile.lock", "composer.lock", "go.sum",
    "pubspec.lock", "flake.lock",
]  # fmt: skip


def lockfile_shapes(text: str) -> list[Shaped]:
    """ "Never edit the lockfile by hand": the lockfiles are written by their tools only."""
    edits = r"\s+(?:\w+\s+){0,2}(?:edit|modify|touch|change|write|update|hand[- ]edit)\w*\s+"
    if not forbids(text, edits + r"(?:the\s+|any\s+)?(?:\w+\s+)?lock ?files?\b"):
        return []
    rule = PathRule(globs=LOCKFILES)
    return [Shaped(rule, write_probe("package-lock.json", "{}\n"), write_probe("src/a.ts", "x\n"))]


POLICY_SHAPES: list[Callable[[str], list[Shaped]]] = [
    dependency_policy_shapes,
    build_mode_shapes,
    no_git_action_shapes,
    commit_style_shapes,
    lockfile_shapes,
]
