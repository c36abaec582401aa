"""Shell actions a prohibition names in prose, for the guard compiler (`compile.py`).

"Never commit, push, or open a pull request", "we never push to main", "never run
scripts/deploy.sh": the words after a negation name git actions, a branch or a script,
without backticks. The span a negation governs ends where a condition, a reason or the
next instruction begins ("never commit without running the tests", "…, run `pnpm gen`").
An action forbidden only under a condition no command check sees ("when CI is red",
"without running the tests") is not denied outright: that guard would block every green
commit. An approval ("without asking", "unless I ask") is a gate, and the reviewer is it.
"""

from __future__ import annotations

import re

from continual_lsp.lanes.guards.spec import CommandRule

# Verb phrases that name a shell action even without backticks ("never commit or push").
ACTIONS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bforce[- ]push\w*", re.I), r"\bgit\s+push\b[^;&|]*\s(--force\S*|-f)\b"),
    (re.compile(r"\bcommit\b(?!\s+messages?)", re.I), r"\bgit\s+commit\b"),
    (re.compile(r"(?<![\w-])push\b", re.I), r"\bgit\s+push\b"),
    (re.compile(r"\b(open|create)\s+(a\s+)?(pull request|pr)\b", re.I), r"\bgh\s+pr\s+create\b"),
    (re.compile(r"\bswitch(ing)?\s+branch(es)?\b", re.I), r"\bgit\s+(checkout|switch)\b"),
    (re.compile(r"\bgit\s+config\b", re.I), r"\bgit\s+config\b"),
    (re.compile(r"\brebase\b", re.I), r"\bgit\s+rebase\b"),
    (re.compile(r"\bamend\b", re.I), r"--amend\b"),
]

SPAN_END = re.compile(
    r"\b(unless|when|if|without|because|except|until|with|instead)\b"
    r"|,\s*(?:and\s+|but\s+)?(?:run|use|add|put|write|create|call|fix|make|let|go)\b",
    re.I,
)
CONDITION = re.compile(r"\s*(?:with|when|if|without)\b", re.I)
APPROVAL_GATE = re.compile(
    r"\s*without\s+(?:\w+\s+)?(?:asking|approval|permission|consent|confirm\w*|instructions?|"
    r"request|being\s+(?:asked|told)|sign-off|me\b)",
    re.I,
)
# "never commit `.env` files" forbids committing those files (a shape), not commits.
COMMITS_AN_OBJECT = re.compile(
    r"\bcommit\s+(`|[\w.*/-]+\s+files?\b|\S+\.\w+\b|"
    r"(?!(?:or|and|nor|to|unless|without|until|anything|any|files?|changes|it|them|"
    r"your|the|this|code|work|on|in|into|directly|yourself|by|for|from|everything|all)\b)"
    r"[a-z][\w-]+\s+\w)",
    re.I,
)
PUSH_TO_BRANCH = re.compile(
    r"\bpush\w*\s+(?:\w+\s+)?(?:to|into|onto)\s+(?:the\s+)?`?([\w./-]+?)`?"
    r"(?:\s+branch)?(?:[\s,.;:]|$)",
    re.I,
)
RUN_SCRIPT = re.compile(
    r"^(?:run|execute|invoke|call|use)\s+`?((?:\.?/)?[\w./-]+\.(?:sh|bash|py|js|ts|rb|pl|ps1))`?",
    re.I,
)


def split_span(words: str) -> tuple[str, bool]:
    """(what the negation governs, whether a condition no command check sees follows)."""
    span = SPAN_END.split(words)[0]
    rest = words[len(span) :]
    conditional = bool(CONDITION.match(rest)) and not APPROVAL_GATE.match(rest)
    return span, conditional


def action_rules(span: str, conditional: bool) -> list[CommandRule]:
    """The command denials a negated span names: a branch pushed to, a script run, and
    the git actions of `ACTIONS` (none when the prohibition is conditional)."""
    rules: list[CommandRule] = []
    branch = PUSH_TO_BRANCH.search(span)
    if branch and branch.group(1).lower() not in ("a", "an", "any", "remote", "origin"):
        name = re.escape(branch.group(1))
        rules.append(CommandRule(pattern=rf"\bgit\s+push\b[^;&|]*[\s:/]{name}(?![\w./-])"))
    else:
        branch = None
    # "never run scripts/deploy.sh": that script, however it is invoked.
    for script in RUN_SCRIPT.findall(span):
        body = re.escape(script.removeprefix("./"))
        rules.append(CommandRule(pattern=rf"(?:^|[\s;&|(/]|\./){body}(?![\w.-])"))
    commits_an_object = COMMITS_AN_OBJECT.search(span)
    for pat, regex in ACTIONS:
        if conditional or (commits_an_object and "commit" in regex):
            continue
        if branch and "push" in regex and "force" not in regex:
            continue
        if pat.search(span) and not re.search(r"\b(messages?|branch names?)\b", span, re.I):
            rules.append(CommandRule(pattern=regex))
    return rules
