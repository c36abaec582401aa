"""Before the lanes (DESIGN §5): is a correction about *this change only*?

"That is not the bug", "change only the line with the bug in calc.py", "wrong file", "just
fix the import", "for this fix, keep the signature": the reviewer steers the task in hand.
Such a correction still chooses the retry and trains the SDPO step (the agent does both
with the text), but it becomes no standing guard or bullet: compiled as a rule, "do not
rewrite the file" said of calc.py would forbid every later change to calc.py.

The test reads general features of the words, not phrases: references that point at the
current change (this/that line, the bug, here, line 7, the file, wrong file), an
imperative narrowed to one definite object ("just fix the import", "change only the
line"), the agent's last action in the past tense ("you rewrote …"). Any sign that the
text speaks in general wins over them: always/never/from now on, a universal quantifier
("any file", "every commit"), the team's convention ("we use", "in this repo").

The interface the agent reads (`allocator.route_correction`):

- A task-scoped correction comes back as a `LaneItem` with `lane == "NONE"` and
  `kind == TASK_KIND` ("task"), and a reason that starts with "Task-scoped". Nothing acts
  on it: guards load CODE items, bullets CONTEXT/WEIGHTS/CODE ones. It joins no cluster
  (no recurrence counts towards WEIGHTS). `spec["task"]` keeps what promotion needs: the
  cues read, and the corrected call's tool, path, task text (and a bash command).
- `routing_ledger.promote(store, item_id, settings)` routes its text again as a standing
  rule (through the lanes, with the stored context); the task item is deactivated and
  names the standing item it became (`spec["task"]["promoted_to"]`).
- Only corrections made on a proposal (a context given) are read this way: a note or a
  rules file speaks in general by the channel it comes through.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from continual_lsp.lanes.reading import Reading

TASK_KIND = "task"

_NOUN = (
    r"(?:line|lines|file|function|method|class|change|fix|edit|diff|hunk|call|bug|test|task|"
    r"loop|block|variable|condition|spot|place|part|attempt|approach|module|import|"
    r"statement|signature|expression|argument|check|command|query|rename|branch of the \w+|one)"
)
_ADJ = r"(?:(?:whole|entire|same|other|right|correct|original|actual|real|first|last|next|"
_ADJ += r"previous|new|exact|one|single|failing|broken|reported|only)\s+)?"
# Generic plurals after a definite article speak of a class of things ("only edit the files
# under src/"), not of the change in hand.
_GENERIC = r"(?!(?:files|code|sources|directories|folders|packages|modules|tests)\b)"

TASK_CUES: list[tuple[str, re.Pattern[str]]] = [
    (
        "points at this change",
        re.compile(rf"\b(?:this|that|these|those)\s+{_ADJ}{_NOUN}s?\b", re.I),
    ),
    (
        "names the bug or fix in hand",
        re.compile(
            r"\bthe\s+(?:actual\s+|real\s+|original\s+|reported\s+|same\s+)?"
            r"(?:bug|fix|typo|off-by-one|regression|crash|failing test)\b",
            re.I,
        ),
    ),
    ("a numbered line", re.compile(r"\blines?\s+\d+\b", re.I)),
    (
        "points to a place",
        re.compile(r"\b(?:look|see|check|start)\s+(?:there|here)\b|^\W*here\b", re.I),
    ),
    (
        "says the attempt is wrong",
        re.compile(
            r"\bwrong\s+(?:\w+\s+)?(?:file|line|function|method|place|module|class|director"
            r"(?:y|ies)|folder|spot|variable|test|approach|fix|tool|path|bug|one)\b"
            # clause-initial: "that is not …" inside a clause is a relative clause
            r"|(?:^|[;,.:!?\u2014\u2013-]\s*|\bno,?\s+)(?:that|this|it)(?:\s+(?:isn'?t|wasn'?t)"
            r"|(?:'s|\s+is|\s+was)\s+(?:not|wrong|incorrect|unrelated|broken))\b"
            r"|^\W*(?:no[,.]?\s+)?not\s+like\s+(?:that|this)\b"
            # "the test is right": a verdict on something in the change in hand
            r"|\b(?:the|this|that)\s+\w+\s+(?:is|was|looks)\s+(?:right|correct|fine|ok|okay)\b"
            r"|\bnot\s+(?:the|where the)\s+(?:bug|problem|issue|cause|culprit)\b"
            r"|\bnot\s+what\s+(?:i|we|you were)\s+(?:asked|wanted|meant)\b",
            re.I,
        ),
    ),
    (
        "narrows the fix to one thing",
        re.compile(
            r"\b(?:just|only)\s+(?:fix|change|edit|touch|update|patch|correct|replace|adjust|"
            r"rename|remove|delete|add|modify)\s+" + _GENERIC + r"(?:the|this|that|it|one|line)\b"
            r"|\b(?:fix|change|edit|touch|update|patch|modify|correct)\s+only\s+"
            + _GENERIC
            + r"(?:the|this|that|it|one|line)\b"
            r"|\b(?:just|only)\s+(?:fix|change|edit|touch|update|patch|correct)\s+"
            r"`?[\w./-]+\.\w+\b",
            re.I,
        ),
    ),
    (
        "the agent's last action",
        re.compile(
            r"\byou(?:'ve|\s+have)?\s+(?:just\s+|also\s+)?(?:rewrote|rewritten|deleted|removed|"
            r"changed|broke|broken|edited|touched|reformatted|renamed|dropped|replaced|overwrote|"
            r"overwritten|missed|forgot|forgotten|introduced|moved|reverted|added|used)\b"
            r"|\b(?:revert|undo|put back|restore)\s+(?:that|this|it|the)\b"
            r"|\b(?:rename|change|put|move|set|turn)\s+(?:it|that|this|them)\s+back\b",
            re.I,
        ),
    ),
]

# Weak alone: "instead of rewriting the whole file", "use pnpm here" also state principles.
WEAK_CUES: list[tuple[str, re.Pattern[str]]] = [
    (
        "a definite line, file or function",
        re.compile(
            rf"\bthe\s+{_ADJ}(?:line|lines|file|function|method|hunk|diff|loop|condition|"
            r"call|edit|change|import|signature|expression)\b(?!\s+(?:names?|types?)\b)",
            re.I,
        ),
    ),
    ("here", re.compile(r"\bhere\b|\bin there\b", re.I)),
]

STANDING_CUES: list[tuple[str, re.Pattern[str]]] = [
    (
        "always/never",
        re.compile(
            r"\b(?:always|never|ever|from now on|going forward|in (?:the )?future|next time|"
            r"every time|whenever|each time|by default|as a rule|in general|all the time|"
            r"anymore|again)\b",
            re.I,
        ),
    ),
    (
        "a universal quantifier",
        re.compile(
            r"\b(?:any|every|all|each)\s+(?!other\b)(?:\w+\s+)?(?:files?|modules?|functions?|"
            r"commits?|changes?|prs?|pull requests?|tests?|migrations?|lines?|packages?|"
            r"scripts?|commands?|components?|endpoints?|handlers?|classes?|code)\b",
            re.I,
        ),
    ),
    (
        "the project's convention",
        re.compile(
            r"\b(?:in|for|across)\s+(?:this|our|the)\s+(?:repo|repository|project|codebase|"
            r"code base|monorepo|team|org|organisation|organization|workspace)\b"
            r"|\bwe\s+(?:use|prefer|don'?t|do not|never|always|follow|keep|require|avoid|only)\b"
            r"|\bour\s+(?:convention|style|rule|policy|standard|codebase|team|guidelines?)\b",
            re.I,
        ),
    ),
    (
        "a habit",
        re.compile(r"\b(?:stop|quit)\s+\w+ing\b|\bkeeps?\s+\w+ing\b", re.I),
    ),
    ("a property of files", re.compile(r"\b(?:is|are)\s+(?:auto-?)?generated\b", re.I)),
    (
        "a general condition",
        re.compile(
            r"\b(?:when|unless|if|only if)\s+(?:explicitly\s+)?(?:asked|told|needed|necessary|"
            r"required|requested)\b|\b(?:in|for)\s+most\s+(?:cases|projects|files|code)\b",
            re.I,
        ),
    ),
]


class TaskScope(BaseModel):
    """Whether a correction stays with its task, and the cues that said so."""

    task_scoped: bool
    cues: list[str] = Field(default_factory=list)  # TASK_CUES names that matched
    standing: list[str] = Field(default_factory=list)  # STANDING_CUES names that matched

    def reason(self) -> str:
        return (
            f"Task-scoped: it speaks of this change ({', '.join(self.cues)}) and states no "
            "standing rule, so it chose the retry and trained the step and stays with its "
            "task; no guard or bullet was made. Promote it to make it a standing rule."
        )


def task_scope(reading: Reading) -> TaskScope:
    """Read one correction: task-scoped when it points at the change in hand (one strong
    cue, or both weak ones) and no cue speaks in general."""
    t = reading.plain
    strong = [name for name, pat in TASK_CUES if pat.search(t)]
    weak = [name for name, pat in WEAK_CUES if pat.search(t)]
    standing = [name for name, pat in STANDING_CUES if pat.search(t)]
    scoped = (bool(strong) or len(weak) == len(WEAK_CUES)) and not standing
    return TaskScope(task_scoped=scoped, cues=strong + weak, standing=standing)
