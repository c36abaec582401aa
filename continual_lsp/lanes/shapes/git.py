"""Rule shapes of git: commit messages (Conventional Commits, their language) and files
never committed.
"""

from __future__ import annotations

import re

from continual_lsp.lanes.features import FILE_TYPES, is_commandish
from continual_lsp.lanes.guards.spec import CommandRule, CommitMessageRule
from continual_lsp.lanes.shapes.kit import (
    CJK_CHARS,
    CONVENTIONAL,
    NEG,
    Shaped,
    backticked,
    bash_probe,
    globs_of,
    negated,
)

# Kinds of files a "never commit …" names in words -> their globs.
COMMITTED_KINDS = {
    r"\bexcel\b": ["*.xlsx", "*.xls"],
    r"\b(?:secrets?|credentials?|api keys?|private keys?)\b": [".env", "*.pem", "*.key"],
    r"\bbinar(?:y|ies)\b": ["*.exe", "*.bin"],
    r"\bnode_modules\b": ["node_modules/**"],
    r"\bbuild (?:artifacts?|artefacts?|outputs?)\b": ["dist/**", "build/**"],
    r"\blogs?(?: files?)?\b": ["*.log"],
}


def git_shapes(text: str) -> list[Shaped]:
    t = text
    out: list[Shaped] = []
    if re.search(r"\bconventional[- ]commits?\b", t, re.I) or (
        re.search(r"\bcommit", t, re.I)
        and re.search(r"`?\b(feat|fix|type)(\([^)]*\))?:|`<type>(?:\(<scope>\))?!?:", t)
        and not negated(t, "conventional")
    ):
        rule = CommitMessageRule(pattern=CONVENTIONAL, must_match=True)
        out.append(
            Shaped(
                rule,
                bash_probe("git commit -m 'updated stuff'"),
                bash_probe("git commit -m 'fix: handle empty input'"),
            )
        )
    language = re.search(r"\b(chinese|english)\b|(中文|英文)", t, re.I)
    if language and re.search(r"\bcommit(?:s| messages?)\b|提交", t, re.I):
        chinese = (language.group(1) or "").lower() == "chinese" or language.group(2) == "中文"
        rule = CommitMessageRule(pattern=CJK_CHARS, must_match=chinese)
        zh, en = (
            bash_probe("git commit -m '修复空输入'"),
            bash_probe("git commit -m 'fix: empty input'"),
        )
        out.append(Shaped(rule, en, zh) if chinese else Shaped(rule, zh, en))
    m = re.search(
        NEG + r"\s+commit\s+(?P<what>.+?)(?:\s+(?:unless|without|to|into)\b|[.;(](?:\s|$)|$)",
        t,
        re.I,
    )
    if m:
        what = m.group("what")
        named = [
            b for b in backticked(what) if re.fullmatch(r"[\w.*/-]+", b) and not is_commandish(b)
        ]
        globs = named + [g for g in globs_of(what) if g not in named]
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
                    bash_probe(f"git add {example}"),
                    bash_probe("git add src/main.py"),
                )
            )
    return out
