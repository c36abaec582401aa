"""Context lane: a bullet with a cue, injected only when the cue matches the turn.

A cue names the tools, path globs and words that make a bullet relevant. A bullet about
`pnpm` has nothing to say to a turn that reads a README; carrying it anyway is the
"context tax" a notes-only agent pays on every call. Both sides of that comparison are
counted on every call (`context_tokens` vs `notes_only_tokens`).

Bullets come from CONTEXT items, from WEIGHTS items not yet consolidated into an adapter
(until promotion the principle is only in context), and from CODE items whose guard is
not built yet (so the rule is not lost while it waits).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from continual_lsp.lanes.features import (
    CJK,
    FILE_TYPES,
    KNOWN_CLI,
    PATHISH,
    STOPWORDS,
    TOOL_WORDS,
    code_spans,
    content_words,
    is_commandish,
    stem,
    words,
)
from continual_lsp.lanes.reading import Reading, Situation
from continual_lsp.store.db import Store
from continual_lsp.tools.base import ToolCall
from continual_lsp.tools.globs import path_matches

Tokenizer = Callable[[str], Any]  # returns an int, or a sequence of tokens

GIT_WORDS = re.compile(r"\b(git|commit|push|branch|rebase|merge|pull request|amend)\b", re.I)
MAX_CUE_WORDS = 6
# Words too common in coding tasks to say anything about relevance.
WEAK_WORDS = frozenset(
    [
        "code",
        "chang",
        "change",
        "work",
        "thing",
        "user",
        "time",
        "way",
        "make",
        "add",
        "adding",
        "write",
        "writ",
        "used",
        "src",
        "source",
        "read",
        "run",
        "runs",
        "start",
        "name",
        "line",
        "lines",
        "edit",
        "made",
        "exist",
        "type",
        "check",
        "now",
        "provide",
        "often",
        "much",
        "both",
        "back",
        "end",
        "full",
        "per",
        "first",
        "say",
        "don",
        "new",
        "old",
        "fix",
        "fixe",
        "issue",
        "sure",
        "want",
        "project",
        "file",
        "need",
        "like",
        "also",
        "just",
        "only",
        "one",
        "two",
    ]
)


class Cue(BaseModel):
    tools: list[str] = Field(default_factory=list)
    paths: list[str] = Field(default_factory=list)  # globs, as in guards
    words: list[str] = Field(default_factory=list)  # stems
    always: bool = False  # nothing to key on: inject on every turn


def make_cue(reading: Reading, situation: Situation | None = None) -> Cue:
    t = reading.plain
    tools: set[str] = set()
    for w in words(t):
        if w in TOOL_WORDS and w in ("edit_lines", "glob", "grep", "bash"):
            tools.add(TOOL_WORDS[w])
    spans = code_spans(t)
    if any(is_commandish(s) for s in spans) or any(w in KNOWN_CLI for w in words(t)):
        tools.add("bash")
    if GIT_WORDS.search(t):
        tools.add("bash")
    paths: list[str] = []
    for m in PATHISH.finditer(t):
        p = m.group(1).strip(".,")
        if not p or re.search(r"<\w+>", p) or p.startswith("http"):
            continue
        # "ios/android" is prose; a path is in backticks, ends with "/" or has an extension.
        if p.endswith("/") or f"`{p}" in t or re.search(r"\.\w{1,5}$", p):
            paths.append(p + "**" if p.endswith("/") else p)
    for m in re.finditer(r"\b(\w+)\s+(?:source\s+)?(files?|sources?|code)\b", t, re.I):
        glob = FILE_TYPES.get(m.group(1).lower())
        if glob and glob not in paths:
            paths.append(glob)
    if situation is not None and situation.tool:
        tools.add(situation.tool)
    at = (situation.path or (situation.arguments or {}).get("path")) if situation else None
    if at and not paths and "." in str(at).rsplit("/", 1)[-1]:
        paths.append("*." + str(at).rsplit(".", 1)[-1])
    vocab: list[str] = []
    for s in spans:
        for w in words(s):
            w = w.strip(".-")
            if len(w) > 2 and w not in vocab and w not in WEAK_WORDS and w not in STOPWORDS:
                vocab.append(w)
    for w in content_words(t):
        if w not in vocab and w not in WEAK_WORDS:
            vocab.append(w)
    cue = Cue(tools=sorted(tools), paths=paths, words=vocab[:MAX_CUE_WORDS])
    if not cue.tools and not cue.paths and not cue.words:
        cue.always = True
    return cue


def _turn_words(task_text: str, calls: Sequence[ToolCall]) -> set[str]:
    out = {stem(w.strip(".-")) for w in words(task_text)}
    out |= {w.strip(".-") for w in words(task_text)}
    for call in calls:
        for v in call.arguments.values():
            if isinstance(v, str):
                out |= {stem(w.strip(".-")) for w in words(v[:2000])}
    return out


def cue_matches(
    cue: Cue | dict[str, Any],
    task_text: str,
    recent_calls: Sequence[ToolCall] = (),
    recent_paths: Iterable[str] = (),
) -> bool:
    c = cue if isinstance(cue, Cue) else Cue.model_validate(cue or {})
    if c.always:
        return True
    # `bash` alone is a weak cue (nearly every turn runs it): it decides only for cues
    # with nothing more specific. A file tool (write, edit_lines …) is specific enough.
    used = {call.tool for call in recent_calls}
    if any(t in used and (t != "bash" or (not c.paths and not c.words)) for t in c.tools):
        return True
    paths = list(recent_paths) + [
        str(call.arguments["path"])
        for call in recent_calls
        if isinstance(call.arguments.get("path"), str)
    ]
    # Paths named in the task text count too ("fix the test in tests/test_ops.py").
    paths += [m.group(1).strip(".,") for m in PATHISH.finditer(task_text)]
    if c.paths and any(path_matches(p, c.paths) for p in paths):
        return True
    if c.words:
        tw = _turn_words(task_text, recent_calls)
        if any(w in tw or stem(w) in tw for w in c.words):
            return True
    return False


def count_tokens(text: str, tokenizer: Tokenizer | None = None) -> int:
    if tokenizer is not None:
        n = tokenizer(text)
        return int(n) if isinstance(n, int | float) else len(n)
    # Whitespace estimate: ~1.3 tokens per word for English; CJK is about one per char.
    return math.ceil(len(text.split()) * 1.3) + len(CJK.findall(text))


def bullet_items(store: Store) -> list[dict[str, Any]]:
    """Active items that live (for now) as bullets."""
    out = []
    for item in store.lane_items(active_only=True):
        spec = item.get("spec") or {}
        if (
            item["lane"] == "CONTEXT"
            or (item["lane"] == "WEIGHTS" and not spec.get("promoted"))
            or (item["lane"] == "CODE" and not spec.get("rules") and not spec.get("allow"))
        ):
            out.append(item)
    return out


def bullets_for_turn(
    store: Store,
    task_text: str,
    recent_calls: Sequence[ToolCall] = (),
    recent_paths: Iterable[str] = (),
    *,
    tokenizer: Tokenizer | None = None,
    count: bool = True,
) -> list[str]:
    """The bullets whose cue matches this turn; bumps the tax counters (one call)."""
    recent_paths = list(recent_paths)
    matched = [
        item
        for item in bullet_items(store)
        if cue_matches(item.get("cue") or {}, task_text, recent_calls, recent_paths)
    ]
    bullets = [item["text"].strip() for item in matched]
    if count:
        for item in matched:
            store.bump(f"fired:{item['id']}")  # a cue match is the bullet acting (ledger)
        carried = sum(count_tokens("- " + b, tokenizer) for b in bullets)
        notes_only = sum(
            count_tokens("- " + item["text"].strip(), tokenizer)
            for item in store.lane_items(active_only=True)
            if item["lane"] != "NONE" and not (item.get("spec") or {}).get("allow")
        )
        store.bump("context_tokens", carried)
        store.bump("notes_only_tokens", notes_only)
        store.bump("context_calls", 1)
    return bullets


def render_bullets(bullets: Sequence[str]) -> str:
    """The block the agent adds to its system prompt (empty when nothing matches)."""
    if not bullets:
        return ""
    return "Rules from your reviewer:\n" + "\n".join(f"- {b}" for b in bullets)
