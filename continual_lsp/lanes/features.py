"""Text features shared by the detector, the guard compiler, the allocator and the cues.

Everything here is general vocabulary about software work (command-line programs, file
types, modal verbs), not phrases memorised from any one rules file: the router is also
scored on rules from repositories it has never seen.
"""

from __future__ import annotations

import json
import re
from importlib import resources

import numpy as np

# The word lists are data (continual_lsp/data/vocabulary.json), read once at import.
_VOCABULARY = json.loads(
    resources.files("continual_lsp").joinpath("data/vocabulary.json").read_text(encoding="utf-8")
)
# Programs whose name at the start of a command segment makes a token "command-ish".
KNOWN_CLI: frozenset[str] = frozenset(_VOCABULARY["known_cli"])
FILE_TYPES: dict[str, str] = _VOCABULARY["file_types"]
KNOWN_FILES: frozenset[str] = frozenset(_VOCABULARY["known_files"])
TOOL_WORDS: dict[str, str] = _VOCABULARY["tool_words"]
STOPWORDS: frozenset[str] = frozenset(_VOCABULARY["stopwords"])


NEG = re.compile(
    r"\b(never|don'?t|do not|avoid|must not|mustn'?t|should not|shouldn'?t|no|not|stop|"
    r"forbidden|prohibited|refrain from|without)\b",
    re.I,
)
ALWAYS = re.compile(r"\b(always|only|must|should|shall|required?|ensure|make sure|use)\b", re.I)
HEDGE = re.compile(
    r"\b(when in doubt|ideally|consider|try to|if you can|if possible|where appropriate|"
    r"use (?:your )?judge?ment|generally|usually|tend to|as much as possible|when it makes sense|"
    r"unless (?:it|there) (?:is|makes)|unless (?:absolutely )?necessary|preferably)\b",
    re.I,
)
MODAL = re.compile(
    r"\b(always|never|must|should|shall|avoid|prefer|don'?t|do not|make sure|ensure|"
    r"from now on|instead|required|mandatory|important|only)\b"
    # Chinese modal words (always, must, don't, forbidden, should, be sure to).
    r"|始终|总是|永远|必须|不要|不得|禁止|应该|应当|务必",
    re.I,
)
# Requests point at one concrete thing ("this file", "my code", "the login function").
DEICTIC = re.compile(
    r"\b(this|these|my|the (?:\w+ )?(?:function|file|route|error|project|codebase|plan|"
    r"changes|tests?|class|bug|issue))\b",
    re.I,
)
REQUEST_OPENERS = re.compile(
    r"^\s*(please\b|can you\b|could you\b|would you\b|help me\b|explain\b|find\b|show\b|"
    r"analy[sz]e\b|implement\b|create\b|refactor\b|suggest\b|fix\b|add\b|build\b|"
    r"generate\b|give me\b|what\b|how\b|why\b|where\b|make\b|"
    # Task-list verbs: "Set up CI", "Configure the linter", "Update the changelog".
    # ("Document public methods", "Extend HTMLElement" are rules-file lines: not here.)
    r"set ?up\b|configure\b|update\b|deploy\b|integrate\b|migrate\b|install\b|"
    r"upgrade\b|enable\b|design\b|investigate\b|research\b|bump\b|enhance\b|connect\b|move\b|"
    r"rename\b|delete\b|replace\b|convert\b|port\b|optimi[sz]e\b|improve\b|clean up\b|"
    r"benchmark\b|scaffold\b|bootstrap\b|refine\b|polish\b|finali[sz]e\b|prepare\b|"
    r"wire up\b|hook up\b)",
    re.I,
)
QUESTION = re.compile(r"\?\s*$")
BEHAVIOUR_WORDS = re.compile(
    r"\b(keep|prefer|avoid|focus|ask|explain|summari[sz]e|don'?t|do not|write|answer|"
    r"repeat|comment|test|change|code|refactor|dry|smallest|over-?engineer|style|case|"
    r"messages?|concise|mood|before|after)\b",
    re.I,
)
FACT_WORDS = re.compile(
    r"\b(is|are|lives?|contains?|located|defaults?|uses|built with|written in|"
    r"implementation|directory|folder|server|port|localhost|endpoint|naming convention)\b"
    r"|这是|是一个|基于|项目",
    re.I,
)
# "<Noun phrase> reads/contains/…": a description of the system, not an instruction.
DESCRIPTIVE_START = re.compile(
    r"^\s*(?:the\s+|our\s+|this\s+)?(?!(?:use|keep|make|run|write|avoid|prefer|test|do|"
    r"don't|never|always|start|ask|add|put|place|check|ensure)\b)[A-Za-z][\w-]*(?:\s+[a-z][\w-]*)?\s+"
    r"(reads|runs|contains|lives|live|uses|handles|creates|stores|owns|exposes|provides|"
    r"follows?|holds|manages|is|are|has|have)\b",
    re.I,
)
# Verbs that open an instruction ("Use …", "Follow …", "Directly provide …").
IMPERATIVE = re.compile(
    r"^\s*(?:\w+ly\s+)?(?:use|keep|follow|prefer|avoid|write|run|add|put|make|ensure|check|"
    r"validate|handle|provide|return|call|name|document|test|be|do|don'?t|never|always|only|"
    r"no|stay|treat|delegate|give|explain|ask|apply|wrap|split|reuse|include)\b",
    re.I,
)
TASK_BOUND = re.compile(r"\b(until|right now|for now|this time|today)\b", re.I)
VERB_DET = re.compile(r"^\s*[A-Za-z]+\s+(a|an|the)\s", re.I)


def instructs(text: str) -> bool:
    return bool(IMPERATIVE.match(text) or MODAL.search(text))


def cjk_fraction(text: str) -> float:
    letters = [c for c in text if not c.isspace()]
    return len(CJK.findall(text)) / max(len(letters), 1)


CODE_SPAN = re.compile(r"`([^`]+)`")
PATHISH = re.compile(
    r"(?<![\w@])((?:[\w.-]+/)+[\w.*<>-]*|[\w.<>*-]+\.(?:py|ts|tsx|js|jsx|json|ya?ml|toml|md|"
    r"go|rs|kt|java|rb|php|css|scss|less|html|sh|lock|cfg|ini|txt|dart|mdc))(?![\w])"
)
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")


def code_spans(text: str) -> list[str]:
    return [s.strip() for s in CODE_SPAN.findall(text) if s.strip()]


def is_commandish(token: str) -> bool:
    """A token that names a shell program or flag (`cargo --release`, `npm`, `--watch`)."""
    token = token.strip().strip("'\"")
    if not token:
        return False
    if token.startswith("-") and re.fullmatch(r"--?[\w-]+(=\S*)?", token):
        return True
    first = token.split()[0].lower()
    return first in KNOWN_CLI


def strip_markup(text: str) -> str:
    """Drop markdown emphasis (`**bold**`, `*em*`) but keep backticks and identifiers."""
    text = text.replace("**", "")
    return re.sub(r"(?<![\w*`])\*(?=\w)([^*\n`]+?)(?<=\w)\*(?![\w*])", r"\1", text)


def words(text: str) -> list[str]:
    return re.findall(r"[a-zA-Z][a-zA-Z0-9_+#.-]*", text.lower())


def stem(word: str) -> str:
    for suffix in ("ing", "ies", "es", "ed", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def content_words(text: str) -> list[str]:
    return [
        stem(w.strip(".-")) for w in words(text) if w.strip(".-") not in STOPWORDS and len(w) > 2
    ]


# -- handcrafted features for the learned heads ------------------------------------------

FEATURE_NAMES = [
    "modal",
    "neg",
    "always",
    "hedge",
    "deictic",
    "request_opener",
    "question",
    "code_span",
    "cli_token",
    "path_token",
    "behaviour_words",
    "fact_words",
    "no_verb_start",
    "cjk",
    "short",
    "imperative_generic",
    # What tells a project fact (CONTEXT) from a way of working (WEIGHTS): facts name the
    # project's own things (identifiers, proper nouns, versions, "we use"), glossary lines
    # and descriptions state rather than instruct, and judgements about working with the
    # user talk about the user and exceptions.
    "identifier_span",
    "proper_nouns",
    "we_use",
    "glossary_line",
    "descriptive_start",
    "user_words",
    "digits",
    "non_command_spans",
]

# A code span holding an identifier of the project: camelCase, `a::b`, `x.y(`, `<Tag`.
IDENTIFIER_SPAN = re.compile(r"`[^`]*(?:[A-Z][a-z]+[A-Z]|[a-z][A-Z]|::|\.\w+\(|<\w)[^`]*`")
# A capitalised word after a lower-case word or punctuation: a name, not a sentence start.
PROPER_NOUN = re.compile(r"(?<=[a-z,;:] )[A-Z][a-zA-Z]*[a-z][A-Z.]?\w*")
WE_USE = re.compile(r"\b(we|our|I)\s+(use|have|are|keep)\b|\bour\b", re.I)
# "`cmd` - what it does", "**Heading**: …", "**Heading:** …": how a rules file opens an
# entry (chat requests don't); a glossary line unless what follows instructs.
GLOSSARY_HEAD = re.compile(r"^\s*(?:(`[^`]+`|\*\*[^*]+\*\*)\s*[:—–-]|\*\*[^*]+:\*\*)\s+")
USER_WORDS = re.compile(
    r"\b(user|asked|requested|explicit(?:ly)?|unless|clarif\w+|approval|permission)\b", re.I
)


def handcrafted(text: str, plain: str) -> np.ndarray:
    """The features of `text`, whose `strip_markup` form is `plain` (`reading.Reading`)."""
    t = plain
    spans = code_spans(t)
    toks = words(t)
    first = toks[0] if toks else ""
    cli = any(is_commandish(s) for s in spans) or any(w in KNOWN_CLI for w in toks)
    starts_verb = bool(REQUEST_OPENERS.match(t)) or first in {
        "use", "run", "write", "keep", "prefer", "avoid", "never", "always", "do", "don't",
        "test", "ask", "make", "start",
    }  # fmt: skip
    feats = [
        bool(MODAL.search(t)),
        bool(NEG.search(t)),
        bool(ALWAYS.search(t)),
        bool(HEDGE.search(t)),
        bool(DEICTIC.search(t)),
        bool(REQUEST_OPENERS.match(t)),
        bool(QUESTION.search(t)),
        bool(spans),
        cli,
        bool(PATHISH.search(t)),
        min(len(BEHAVIOUR_WORDS.findall(t)), 3) / 3,
        min(len(FACT_WORDS.findall(t)), 3) / 3,
        not starts_verb,
        bool(CJK.search(t)),
        len(toks) <= 6,
        bool(MODAL.search(t)) and not DEICTIC.search(t),
        bool(IDENTIFIER_SPAN.search(text)),
        min(len(PROPER_NOUN.findall(t)), 3) / 3,
        bool(WE_USE.search(t)),
        bool(GLOSSARY_HEAD.match(text))
        and not instructs(strip_markup(GLOSSARY_HEAD.sub("", text))),
        bool(DESCRIPTIVE_START.match(t)),
        bool(USER_WORDS.search(t)),
        any(c.isdigit() for c in t),
        min(sum(not is_commandish(s) for s in spans), 3) / 3,
    ]
    return np.asarray(feats, dtype=np.float32)
