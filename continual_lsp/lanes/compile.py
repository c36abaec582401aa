"""Compile a rule's text into a declarative `GuardSpec`, or say it cannot be guaranteed.

This is the CODE test of the ordered policy: a rule goes to the code lane when a
deterministic function can guarantee it, and the most honest way to know is to try to
build that function. The patterns are general shapes of rules, not memorised rows:

- substitution: "use A, never B", "prefer `A` over `B`", "never run `B` - use `A`",
  "B commands should be run via `A ...`"  -> command rewrite (or content deny);
- prohibition: "never/don't/avoid <verb> X" where X is a command, a flag, a code token,
  a path or a file type -> command deny, content deny, path deny;
- approval gates: "before running `X`, get approval" -> deny X (the reviewer approves);
- size limits: "files must be under N lines" -> size rule.

Hedged rules ("ideally", "when in doubt", "consider") are never compiled: a guard that
blocks what the rule allows as an exception would be wrong, so they stay judgement.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from continual_lsp.config import Settings
from continual_lsp.lanes import llm
from continual_lsp.lanes.features import (
    FILE_TYPES,
    HEDGE,
    KNOWN_CLI,
    KNOWN_FILES,
    PATHISH,
    is_commandish,
)
from continual_lsp.lanes.guards.guard_code import run_guard_code
from continual_lsp.lanes.guards.spec import (
    CommandRule,
    ContentRule,
    GuardSpec,
    PathRule,
    PythonRule,
    Rule,
    SizeRule,
    ToolRule,
)
from continual_lsp.lanes.prose_actions import action_rules, split_span
from continual_lsp.lanes.reading import Reading, Situation
from continual_lsp.lanes.shapes import (
    SHAPES,
    dir_globs,
    fires,
    new_ones_allowed,
    program_pattern,
    shaped_rules,
    synthesise,
)
from continual_lsp.lanes.shapes.conventions import CONVENTION_SHAPES
from continual_lsp.lanes.shapes.repo_policy import POLICY_SHAPES
from continual_lsp.tools.base import CALL_TOOLS

PACKAGE_MANAGERS = frozenset({"npm", "yarn", "pnpm", "bun"})

# Known code smells named in prose -> regex on added lines.
SMELLS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"\bnested\s+ternar", re.I),
        r"(?<![?.])\?(?![.?:])[^;\n]*?(?<![?.])\?(?![.?:])[^;\n]*:",
    ),
    (re.compile(r"\bconsole\.log\b", re.I), r"\bconsole\.log\("),
    (re.compile(r"\bdebug(ger)? statements?\b", re.I), r"\bdebugger\b|\bbreakpoint\(\)"),
]

NEG_WORD = re.compile(
    r"\b(never|don'?t|do not|avoid|must not|mustn'?t|should not|shouldn'?t|no|not|"
    r"forbidden|prohibited|refrain from|instead of|rather than|over)\b",
    re.I,
)
POS_WORD = re.compile(r"\b(always|use|prefer|via|through|only)\b", re.I)
# Words allowed between a negation and the thing it forbids ("never run bare `tsc`").
GLUE = frozenset(
    [
        "use",
        "run",
        "call",
        "add",
        "write",
        "import",
        "include",
        "put",
        "emit",
        "bare",
        "any",
        "the",
        "a",
        "an",
        "or",
        "and",
        "nor",
        "using",
        "running",
        "calling",
        "adding",
        "writing",
        "invoke",
        "invoking",
        "execute",
        "executing",
        "manually",
        "directly",
    ]
)
EDIT_VERBS = re.compile(
    r"\b(edit|modify|touch|change|write( to)?|create|delete|remove|overwrite|commit)\b", re.I
)
APPROVAL = re.compile(r"\b(approval|permission|ask|confirm|consent)\b", re.I)
SIZE = re.compile(
    r"\b(?:under|at most|no more than|fewer than|less than|max(?:imum)?(?: of)?|exceed|"
    r"longer than|more than)\s+(\d+)(?:\s*[-–]\s*(\d+))?\s+lines\b",
    re.I,
)


@dataclass
class Item:
    text: str
    start: int
    code: bool  # in backticks
    polarity: str  # "pos" | "neg" | "neutral"


def _clauses(text: str) -> list[str]:
    # Sentence ends and em dashes separate clauses; " - " too (a hyphen inside a flag does not).
    parts = re.split(r"(?<=[.;!?])\s+|\s+[—–]\s+|\s+-\s+|[—–]", text)
    return [p.strip() for p in parts if p and p.strip()]


def _items(clause: str) -> list[Item]:
    """Code spans, CLI names and identifier-like words, with the polarity in force there."""
    found: list[tuple[int, str, bool]] = []
    taken: list[tuple[int, int]] = []
    for m in re.finditer(r"`([^`]+)`", clause):
        found.append((m.start(), m.group(1).strip(), True))
        taken.append((m.start(), m.end()))
    # Identifiers as prose writes them, backticks or not: `foo.bar()`, `@ts-ignore`,
    # `.Result`, a Rust macro `panic!` (before a lower-case word), `interface{}`.
    for m in re.finditer(
        r"(?<![\w`./@-])([@.]?[A-Za-z](?:[\w+-]|\.(?=\w))*(?:\(\)|!(?=\s+[a-z(])|\{\})?)(?![\w`])",
        clause,
    ):
        if any(a <= m.start() < b for a, b in taken):
            continue
        word = m.group(1)
        prev = clause[: m.start()].rstrip().lower()
        after_use = bool(re.search(r"\b(use|using)$", prev))
        identifier = _codey(word) or (word[0].isupper() and after_use)
        # "Python loops" names the language; a program is written in lower case or backticks.
        if word in KNOWN_CLI or (identifier and not word.isupper()):
            found.append((m.start(), word, False))
    found.sort()
    items: list[Item] = []
    for start, text, code in found:
        before = clause[:start]
        pol = "neutral"
        last_neg = max((m.end() for m in NEG_WORD.finditer(before)), default=-1)
        last_pos = max((m.end() for m in POS_WORD.finditer(before)), default=-1)
        if last_neg >= 0 and last_neg >= last_pos:
            pol = "neg"
        elif last_pos >= 0:
            # "never use X", "never run tests via X": the means a negation governs.
            neg_then_use = re.search(
                NEG_WORD.pattern + r"\s+((\w+\s+)?use|(run|execute)(\s+\w+){0,2}\s+via)\s*$",
                before[: last_pos + 1],
                re.I,
            )
            pol = "neg" if neg_then_use else "pos"
        colon = before.rfind(":")
        if pol == "neg" and colon > last_neg:
            # A colon ends the negation's scope: in "not npm: run `pnpm add x`" the code
            # span is what to do, and an imperative right after the colon says so.
            after = before[colon + 1 :]
            pol = "pos" if re.match(r"\s*(run|use|call|try)\b", after, re.I) else "neutral"
        if pol == "neg" and last_neg >= 0:
            gap = re.findall(r"[\w']+", before[last_neg:])
            means = re.fullmatch(r"\s*(run|execute)(\s+\w+){0,2}\s+via\s*", before[last_neg:], re.I)
            # "don't silence the checker with `# type: ignore`": the backticked instrument
            # of a negated verb is what it forbids.
            means = means or (code and re.search(r"\b(?:with|using|by adding)\s*$", before, re.I))
            # Only the words a prohibition governs: "never on `main`" forbids nothing here.
            if not means and any(
                w.lower() not in GLUE and not _is_item_word(w, items) for w in gap
            ):
                pol = "neutral"
        items.append(Item(text=text, start=start, code=code, polarity=pol))
    return items


def _is_item_word(word: str, items: list[Item]) -> bool:
    return any(word in it.text.split() or word == it.text for it in items)


def _command_pattern(cmd: str) -> str:
    cmd = cmd.strip()
    if not cmd.endswith(" ."):  # `git add .` names the directory; "run tests." ends a sentence
        cmd = cmd.rstrip(".").strip()
    if cmd.startswith("-"):
        return r"(?<!\S)" + re.escape(cmd.split("=")[0]) + r"(?![\w-])"
    words = cmd.replace("...", "").split()
    body = r"\s+".join(re.escape(w) for w in words)
    return r"(^|[;&|(]\s*|\bsudo\s+)" + body + r"(?![\w-])"


def _content_pattern(token: str) -> str:
    token = token.strip()
    if token.endswith("()]") or token.endswith("()"):
        token = token[: token.index("()") + 1]
    if "*" in token:
        return r"\b" + r"\w*".join(re.escape(p) for p in token.split("*"))
    esc = re.escape(token)
    return (r"\b" if token[0].isalnum() else "") + esc + (r"\b" if token[-1].isalnum() else "")


def _globs_in(span: str) -> list[str]:
    globs: list[str] = []
    for m in PATHISH.finditer(span):
        p = m.group(1).strip(".,")
        if not p or p.startswith("http"):
            continue
        if re.search(r"<\w+>", p):
            continue  # a template like modular_<name>.py names no concrete file
        globs.append(p if not p.endswith("/") else p + "**")
    # File names PATHISH does not know the extension of (`terraform.tfstate`) and globs
    # (`*.Designer.cs`), when they are plainly file names.
    for m in re.finditer(
        r"(?<![\w/.*-])(\*[\w.-]*\.[A-Za-z]\w*|[\w-]+\.(?:tfstate|tfvars|tf|cs|csproj|sln|sql|"
        r"proto|gradle|kts?|swift|ex|exs|xml|plist|pbxproj|properties|conf|env|gemspec|lockb))"
        r"(?![\w/])",
        span,
    ):
        if m.group(1) not in globs:
            globs.append(m.group(1))
    for w in re.findall(r"[\w.-]+", span):
        if w.lower() in KNOWN_FILES and w.lower() not in [g.lower() for g in globs]:
            globs.append(w)
    return globs


def compile_guard(reading: Reading, situation: Situation | None = None) -> GuardSpec | None:
    """A guard spec that enforces the correction read, or None when no deterministic check can.

    `situation` holds the corrected call when the text is a denial's comment: "use pnpm"
    said of `npm install x` means "rewrite npm to pnpm".
    """
    if HEDGE.search(reading.plain):
        return None
    # Copies: a spec's rules belong to it, the cached ones to every later reading.
    rules = [r.model_copy(deep=True) for r in _text_rules(reading.plain)]
    if not rules and situation is not None:
        mentioned = [it for c in _clauses(reading.plain) for it in _items(c)]
        rules.extend(_from_denied_call(mentioned, situation))
    if not rules:
        return None
    # Dedupe while keeping order (the same token can be found by two patterns).
    seen: set[str] = set()
    unique: list[Rule] = []
    for r in rules:
        key = r.model_dump_json()
        if key not in seen:
            seen.add(key)
            unique.append(r)
    return GuardSpec(message=reading.text.strip(), rules=unique)


@functools.lru_cache(maxsize=256)
def _text_rules(t: str) -> tuple[Rule, ...]:
    """The rules the text alone compiles to. Cached by text: one correction is compiled by
    the detector (is it a standing rule?) and again by the allocator (which lane?)."""
    rules: list[Rule] = []
    mentioned = [it for c in _clauses(t) for it in _items(c)]
    rules.extend(_command_rules(mentioned))
    for clause in _clauses(t):
        rules.extend(_clause_rules(clause, t))
    m = SIZE.search(t)
    if m and re.search(r"\b(must|should|never|always|keep|no)\b", t, re.I):
        rules.append(SizeRule(max_lines=int(m.group(2) or m.group(1))))
    # Tool-level prohibitions: "never use the bash tool".
    for m in re.finditer(r"\b(?:never|don'?t|do not)\s+use\s+the\s+(\w+)\s+tool\b", t, re.I):
        if m.group(1).lower() in CALL_TOOLS:
            rules.append(ToolRule(deny=[m.group(1).lower()]))
    # Self-check what the phrase patterns built: a rule whose guard does not fire on the
    # situation synthesised from its own literal, or fires on a harmless one, is dropped.
    rules = [r for r in rules if (s := synthesise(r)) is None or fires(s)]
    rules.extend(shaped_rules(t, [*SHAPES, *CONVENTION_SHAPES, *POLICY_SHAPES]))
    return tuple(rules)


def _from_denied_call(items: list[Item], situation: Situation) -> list[Rule]:
    """A substitution whose "never" half is the denied command itself."""
    if situation.tool != "bash":
        return []
    cmd = str((situation.arguments or {}).get("cmd", "")).strip()
    program = cmd.split()[0] if cmd else ""
    pos = [i for i in items if i.polarity == "pos" and is_commandish(i.text)]
    if len(pos) != 1 or program not in PACKAGE_MANAGERS:
        return []
    good = pos[0].text.split()[0]
    if good == program or good not in PACKAGE_MANAGERS:
        return []
    return [CommandRule(pattern=program_pattern(program), replace=r"\g<1>" + good)]


def _command_rules(items: list[Item]) -> list[Rule]:
    """Command substitution / prohibition over the whole text ("never `tsc` - use `yarn x`")."""
    rules: list[Rule] = []
    mentioned = items
    neg_cmd = [i for i in items if i.polarity == "neg" and is_commandish(i.text)]
    pos_cmd = [i for i in items if i.polarity == "pos" and is_commandish(i.text)]
    if neg_cmd:
        single = all(len(i.text.split()) == 1 and not i.text.startswith("-") for i in neg_cmd)
        same_family = (
            len(pos_cmd) == 1
            and pos_cmd[0].text.split()[0].lower() in PACKAGE_MANAGERS
            and all(i.text.lower() in PACKAGE_MANAGERS for i in neg_cmd)
        )
        one_to_one = len(pos_cmd) == 1 and len(neg_cmd) == 1 and single
        if pos_cmd and single and (same_family or one_to_one):
            good = pos_cmd[0].text.replace("...", "").strip()
            if same_family:
                # One manager for another, keeping the subcommand: "not npm: run `pnpm add
                # x`" makes `npm test` → `pnpm test`, not `pnpm add x test`.
                good = good.split()[0]
            for i in neg_cmd:
                rules.append(CommandRule(pattern=program_pattern(i.text), replace=r"\g<1>" + good))
        else:
            for i in neg_cmd:
                rules.append(CommandRule(pattern=_command_pattern(i.text)))
    elif pos_cmd:
        # "always use `yarn jest --no-watch`" while the text mentions `yarn test`, or
        # "python commands should be run via `uv run python ...`": rewrite the other form.
        good = pos_cmd[0].text.replace("...", "").strip()
        gw = good.split()
        for other in mentioned:
            if other.polarity != "neutral" or not is_commandish(other.text):
                continue
            ow = other.text.split()
            if other.text == good or other.text.startswith("-"):
                continue
            if len(ow) == 1 and ow[0] in gw[1:]:
                rules.append(CommandRule(pattern=program_pattern(ow[0]), replace=r"\g<1>" + good))
            elif len(ow) > 1 and ow[0] == gw[0] and ow != gw:
                rules.append(
                    CommandRule(pattern=_command_pattern(other.text), replace=r"\g<1>" + good)
                )

    return rules


def _clause_rules(clause: str, text: str) -> list[Rule]:
    rules: list[Rule] = []
    items = _items(clause)
    neg = [i for i in items if i.polarity == "neg"]
    neg_code = [
        i
        for i in neg
        if not is_commandish(i.text)
        and (i.code or i.text[0].isupper() or _codey(i.text))
        and not PATHISH.fullmatch(i.text)
    ]

    # 2. code tokens that must not be written (also not inside a commit message); a
    # tool's own name ("not edit_lines", "no `edit`") refuses the tool, not the word
    for i in neg_code:
        if i.text in CALL_TOOLS:
            rules.append(ToolRule(deny=[i.text]))
            continue
        pat = _content_pattern(i.text)
        if not i.code and not _codey(i.text):
            stem = re.sub(r"(es|s)$", "", i.text.lower())
            rules.append(ContentRule(pattern=r"\b" + re.escape(stem), ignore_case=True))
            continue
        rules.append(ContentRule(pattern=pat))
        if re.search(r"\bcommit", clause, re.I):
            rules.append(CommandRule(pattern=r"(?i)" + re.escape(i.text)))

    # 3. negated shell actions in prose ("never commit, push, or open a pull request")
    for m in re.finditer(NEG_WORD.pattern + r"\s+(?P<span>(?:[^.;:]|[.:](?=\S))*)", clause, re.I):
        if m.group(1).lower() in ("over", "instead of", "rather than", "not", "no"):
            continue
        span, conditional = split_span(m.group("span"))
        if "`" in span and any(i.code and i.polarity == "neg" for i in items):
            continue  # the backticked form already produced the rule
        rules.extend(action_rules(span, conditional))
        # path prohibitions: "never edit files under vendor/", "never edit pubspec.yaml"
        if EDIT_VERBS.search(span):
            globs = dir_globs(_globs_in(span))
            if globs:
                rules.append(PathRule(globs=globs, existing_only=new_ones_allowed(clause, text)))

    # 4. "NO CSS files", "no new .js files"
    for m in re.finditer(
        r"\b(?:no|never(?: create| add)?|don'?t (?:create|add))\s+(?:new\s+)?\.?(\w+)\s+files\b",
        clause,
        re.I,
    ):
        glob = FILE_TYPES.get(m.group(1).lower())
        if glob:
            rules.append(PathRule(globs=[glob], tools=["write"]))

    # 5. approval gates: "before running `git push`, stop and get explicit approval"
    m = re.search(r"\bbefore\s+(?:running|using|calling|executing)\s+(.+)", clause, re.I)
    if m and APPROVAL.search(clause):
        for i in items:
            if i.start >= m.start(1) and is_commandish(i.text):
                rules.append(CommandRule(pattern=_command_pattern(i.text)))

    # 6. named code smells under a prohibition
    if re.search(r"\b(avoid|never|no|don'?t|do not)\b", clause, re.I):
        for pat, regex in SMELLS:
            if pat.search(clause):
                rules.append(ContentRule(pattern=regex))
    return rules


def _codey(word: str) -> bool:
    return bool(re.search(r"[._()\[\]#&|@{}]|\w!$|[a-z][A-Z]|[A-Z]\w*-[A-Z]", word))


# Rules a deterministic check could guarantee, but not with the declarative rule kinds
# (they need the end of a turn, a tool's result, or a lint pass): CODE with a pending guard.
_CHECKABLE: list[tuple[str, re.Pattern[str]]] = [
    (
        "artefact language by script detection",
        re.compile(
            r"(?=.*(中文|英文|日本語|chinese|english|japanese|korean|ascii))"
            r"(?=.*(commit|代码|字符串|错误信息|string|error message|identifier|code comment))"
            r"(?!.*(用户|对话|user|talk|speak|reply|chat))",
            re.I,
        ),
    ),
    (
        "a command that must run at a trigger point",
        re.compile(
            r"\b(always\s+)?run\s+`[^`]+`\s+(on|after|before|against)\b|"
            r"\bafter\s+[^.]*\balways\s+run\s+`",
            re.I,
        ),
    ),
    ("a coverage threshold", re.compile(r"\b\d{2,3}\s*%\s*(test\s+)?coverage\b", re.I)),
    (
        "a naming prefix or suffix",
        re.compile(r"^\s*use\s+`[^`]+`\s+(prefix|suffix)\b", re.I),
    ),
    (
        "where new files must be saved",
        re.compile(
            r"\b(ensure|must|always|should)\b.*\b(saved|stored|written|placed|kept)\s+"
            r"(under|in|into|to)\s+(the\s+)?`?[\w.-]+/[\w./-]*",
            re.I,
        ),
    ),
]


def checkable_cues(reading: Reading) -> list[str]:
    """Names of the deterministic checks that could guarantee the text (no spec built)."""
    t = reading.plain
    if HEDGE.search(t):
        return []
    return [name for name, pat in _CHECKABLE if pat.search(t)]


def llm_guard_spec(text: str, settings: Settings | None = None) -> GuardSpec | None:
    """Optional: ask xAI for guard code, run it once in the sandbox on a harmless call.

    None when xAI is off (`allocator = "offline"`), declines, or its code does not behave.
    The code only ever runs through `lanes.guards.guard_code` (a subprocess), never in this
    process.
    """
    answer = llm.ask("guard", text, settings)
    if not isinstance(answer, llm.GeneratedGuard) or not answer.feasible:
        return None
    if "def check" not in answer.code:
        return None
    probe = {"call": {"tool": "read", "arguments": {"path": "README.md"}}, "preview": None}
    result = run_guard_code(answer.code, probe)
    if not result.ok or not (result.value is None or isinstance(result.value, dict)):
        return None
    return GuardSpec(message=text.strip(), rules=[PythonRule(code=answer.code)])
