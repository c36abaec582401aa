"""Rule shapes of language and framework idioms: docstrings, type hints, function
components, declarations, licence headers, hard-coded text or values, loggers instead of
prints, and the language of generated artefacts.
"""

from __future__ import annotations

import re

from continual_lsp.lanes.guards.spec import ContentRule
from continual_lsp.lanes.shapes.content import DENIALS, deny
from continual_lsp.lanes.shapes.kit import (
    CJK_CHARS,
    CODE_FILES,
    JS,
    NEG,
    OUTPUT_CALLS,
    UI_FILES,
    Shaped,
    example_path,
    forbids,
    languages_of,
    negated,
    write_pair,
)


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
    langs = languages_of(t)
    python = not langs or "*.py" in langs
    if (
        re.search(r"\bdocstrings?\b", t, re.I)
        and re.search(r"\b(all|every|each|public|functions?|methods?|classes?)\b", t, re.I)
        and not negated(t, "docstring")
        and python
    ):
        deny(out, *DENIALS["missing_docstring"])
    if re.search(r"\bjs ?doc\b", t, re.I) and not negated(t, "jsdoc"):
        deny(out, *DENIALS["missing_jsdoc"])
    if (
        re.search(r"\btype (?:hints?|annotations?)\b", t, re.I)
        and not negated(t, "type")
        and python
    ):
        deny(out, *DENIALS["missing_type_hints"])
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
        and not negated(t, "function")
    ) or forbids(t, r"\s+(?:\w+\s+)?class components?\b"):
        deny(out, *DENIALS["class_component"])
    if re.search(r"\barrow functions?\b", t, re.I) and re.search(r"\bparen", t, re.I):
        if re.search(r"\b(without|omit\w*|no|avoid|drop)\b[^.]*\bparen", t, re.I):
            deny(out, *DENIALS["arrow_parens"])
        elif re.search(r"\b(always|with|require\w*|include)\b[^.]*\bparen", t, re.I):
            deny(out, *DENIALS["arrow_bare_parameter"])
    return out


def _declaration_shapes(t: str) -> list[Shaped]:
    """Types over interfaces (or back), force unwraps, `_private` fields."""
    out: list[Shaped] = []
    if re.search(
        r"\btypes?\b`?[^.]*\b(?:over|instead of|rather than|not)\s+`?interfaces?\b", t, re.I
    ):
        deny(out, *DENIALS["interface"])
    elif re.search(
        r"\binterfaces?`?\s+(?:for\s+(?:all\s+)?(?:object|props|data)|over|instead of|rather than)\b",
        t,
        re.I,
    ) and re.search(r"\b(use|prefer|always)\b", t, re.I):
        deny(out, *DENIALS["type_alias"])
    if re.search(r"\bforce[- ]?unwrap", t, re.I) and re.search(NEG, t, re.I):
        deny(out, *DENIALS["force_unwrap"])
    if re.search(r"\bprivate (?:fields?|members?|properties|variables?)\b", t, re.I) and re.search(
        r"\bprefix\w*\s+(?:with\s+)?(?:an?\s+)?(?:`_`|underscores?)|\bunderscore prefix", t, re.I
    ):
        deny(out, *DENIALS["private_without_underscore"])
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
        and not negated(t, "licen")
    ):
        return []
    rule = ContentRule(
        pattern=r"SPDX-License-Identifier|[Cc]opyright|Licensed under",
        path_globs=CODE_FILES,
        required=True,
    )
    return [write_pair(rule, "src/a.py", "x = 1\n", "# SPDX-License-Identifier: MIT\nx = 1\n")]


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
            out.append(write_pair(ContentRule(pattern=pattern, path_globs=globs), path, bad, good))
    if re.search(r"\b(colou?rs?|theme)\b", t, re.I):
        rule = ContentRule(
            pattern=r"(?<=['\":\s])#(?:[0-9a-fA-F]{3}){1,2}(?:[0-9a-fA-F]{2})?\b|\brgba?\(",
            path_globs=[*JS, "*.css", "*.scss"],
            exclude_globs=["*theme*", "*tokens*", "*colors*"],
        )
        out.append(
            write_pair(
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
            path = example_path(globs, "src/example.js")
            out.append(
                write_pair(
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
    return [write_pair(rule, "src/a.py", bad, 'x = 1  # "count"\n')]
