"""Rule shapes of order: "after changing X run Y", "run the tests before committing",
formatters run on the files they format.
"""

from __future__ import annotations

import re

from continual_lsp.lanes.features import is_commandish
from continual_lsp.lanes.guards.spec import SequenceRule
from continual_lsp.lanes.shapes.kit import (
    FORMATTERS,
    NEG,
    Shaped,
    backticked,
    bash_probe,
    example_path,
    languages_of,
)
from continual_lsp.tools.base import ToolCall


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
    path = example_path(globs, "src/example.py")
    change = ToolCall(tool="write", arguments={"path": path, "content": "x\n"})
    ran = ToolCall(tool="bash", arguments={"cmd": step})
    commit = "git commit -m 'fix: x'"
    return Shaped(rule, bash_probe(commit, [change]), bash_probe(commit, [change, ran]))


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
        bash_probe("git commit -m 'fix: x'", [change]),
        bash_probe("git commit -m 'fix: x'", [change, ran]),
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
    steps = [s for s in (_step_command(b) for b in backticked(t)) if s]
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
        out.append(_sequence_shape(steps[0], "commit", languages_of(t)))
        return out
    if steps and runs and trigger:
        out.append(_sequence_shape(steps[0], "commit", languages_of(t)))
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
