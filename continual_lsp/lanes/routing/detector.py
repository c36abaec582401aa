"""Is a message a standing correction / rule, or an ordinary request?

Offline by default: a text a guard compiles from that names no one thing to work on is a
rule (`guards_in_general`); otherwise a rule score from general cues (modal verbs such as
always/never/must/prefer, generic vs deictic reference, question form, imperative request
openers) averaged with a logistic head over MiniLM embeddings (`learned.py`) when one is
shipped.
Requests point at one concrete thing ("this file", "the login function", "my changes");
rules speak in general ("never", "always", "any Go file") or state facts about the
project ("Kotlin with Jetpack Compose").

A denial's comment is a correction by construction (`denial=True`): the reviewer just
rejected a call and said why.

Optional: with the setting `allocator = "xai"` (and `use_llm` not False), xAI answers with
structured output (`llm.py`); any failure falls back to the offline path.
"""

from __future__ import annotations

import re

import numpy as np
from pydantic import BaseModel, Field

from continual_lsp.config import Settings
from continual_lsp.lanes import llm
from continual_lsp.lanes.compile import compile_guard
from continual_lsp.lanes.features import (
    CJK,
    DEICTIC,
    FEATURE_NAMES,
    GLOSSARY_HEAD,
    HEDGE,
    MODAL,
    PATHISH,
    QUESTION,
    REQUEST_OPENERS,
    TASK_BOUND,
    VERB_DET,
    cjk_fraction,
)
from continual_lsp.lanes.reading import Reading
from continual_lsp.lanes.routing.embed import Embedder, get_embedder
from continual_lsp.lanes.routing.learned import shipped_heads

STANDING = re.compile(
    r"\b(from now on|going forward|in (the )?future|next time|every time|whenever|each time|"
    r"you need to|when asked|any (\w+ )?files?|all (\w+ )?(files|commands|messages)|"
    r"by default|stop (doing|adding|putting|writing)|wont stop|won't stop|keeps? (adding|doing)|"
    r"(?:on|before|after|with) (?:every|each|any) (?:commit|push|pull request|pr|change|release)|"
    # "Update `ROADMAP.md` when completing a feature": a trigger, so a standing rule.
    r"(?:when|before|after) (?:completing|adding|changing|creating|writing|modifying|editing|"
    r"finishing|making|introducing|removing|renaming))\b",
    re.I,
)


# What points at the work in hand ("this file", "my changes", "the bug"); narrower than
# DEICTIC, whose "the tests" is also how rules speak ("after every change, run the tests").
THIS_WORK = re.compile(
    r"\b(this|these|my|the (?:changes|change|bug|issue|plan|error|branch))\b", re.I
)


class Detection(BaseModel):
    is_correction: bool
    confidence: float = Field(ge=0.0, le=1.0)
    source: str  # "denial" | "offline" | "llm"
    rule_score: float = 0.5
    head_score: float | None = None


def rule_score(reading: Reading) -> float:
    t = reading.plain
    score = 0.5
    modal = bool(MODAL.search(t)) or bool(STANDING.search(t))
    deictic = bool(DEICTIC.search(t))
    opener = bool(REQUEST_OPENERS.match(t))
    if modal:
        score += 0.3
    if STANDING.search(t):
        score += 0.1
    if HEDGE.search(t):
        score += 0.05
    if deictic:
        # "my code" inside a "do not …" is still a standing correction; halve the penalty.
        score -= 0.15 if modal else 0.3
    if opener and not modal:
        score -= 0.25
    if QUESTION.search(t) and not modal:
        score -= 0.2
    if not opener and not deictic and not QUESTION.search(t):
        # Declarative statements in a rules file are project facts worth remembering.
        score += 0.15
    if GLOSSARY_HEAD.match(reading.text):
        score += 0.2  # an entry of a rules file ("`make test` - runs …", "**Scope**: …")
    if CJK.search(t) and not deictic:
        score += 0.1
    if TASK_BOUND.search(t):
        score -= 0.2  # "do not stop until X passes" is about this task only
    if VERB_DET.match(t) and not modal:
        score -= 0.2  # "Write a test for …": one concrete artefact, a request
    return float(min(max(score, 0.0), 1.0))


def detect(
    reading: Reading,
    *,
    denial: bool = False,
    use_llm: bool | None = None,
    embedder: Embedder | None = None,
    settings: Settings | None = None,
) -> Detection:
    if denial:
        return Detection(is_correction=True, confidence=1.0, source="denial", rule_score=1.0)
    if use_llm is not False:
        answer = llm.ask("detect", reading.text, settings)
        if isinstance(answer, llm.DetectionAnswer):
            conf = float(min(max(answer.confidence, 0.0), 1.0))
            return Detection(is_correction=answer.is_correction, confidence=conf, source="llm")
    return detect_offline(reading, embedder=embedder)


def guards_in_general(reading: Reading) -> bool:
    """A guard compiles from the text and it names no one thing to work on: a standing rule
    ("Package manager: pnpm", "Name constants in ALL_CAPS"), whatever its grammar says.

    "The compiler decides CODE": a text the compiler turns into a check on every proposal is
    a rule unless it points at one file or one piece of work ("Add type hints to
    `utils.py`", "Commit the changes with a conventional message"), which requests do.
    """
    t = reading.plain
    if THIS_WORK.search(t) or TASK_BOUND.search(t) or QUESTION.search(t):
        return False
    named_file = any("." in m.group(1).rsplit("/", 1)[-1] for m in PATHISH.finditer(t))
    return not named_file and compile_guard(reading) is not None


def detect_offline(reading: Reading, embedder: Embedder | None = None) -> Detection:
    rs = rule_score(reading)
    head_p: float | None = None
    heads = shipped_heads()
    emb = embedder or get_embedder()
    if heads is not None and heads.dim == emb.dim + len(FEATURE_NAMES):
        x = np.concatenate([emb.embed([reading.text])[0], reading.features])
        head_p = float(heads.prob("correction", x[None, :])[0])
    # MiniLM is an English model: on mostly-CJK text its vote is noise, so rules decide.
    w = 0.0 if head_p is None or cjk_fraction(reading.text) > 0.3 else 0.5
    p = (1 - w) * rs + w * (head_p or 0.0)
    is_corr = p >= 0.5 or guards_in_general(reading)
    return Detection(
        is_correction=is_corr,
        confidence=float(p if is_corr else 1.0 - p),
        source="offline",
        rule_score=rs,
        head_score=head_p,
    )
