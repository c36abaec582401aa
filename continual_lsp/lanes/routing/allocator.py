"""The allocator: the ordered policy of DESIGN §5, one decision per correction, with a reason.

1. CODE iff a guard exists: the guard compiler (`compile.py`, `shapes.py`) builds a
   declarative spec from the text and keeps only rules that pass their self-check (fire
   on a synthesised violation, let a compliant call through). The learned `checkable`
   head and the cue list only propose: a rule they call checkable but no guard compiles
   from goes on down the policy, its reason saying that a guard could be attached (the
   optional xAI guard writer is the last try).
2. WEIGHTS when it is a behavioural judgement (how to work, communicate, write) AND its
   cluster has recurred at least `Settings.weights_recurrence` times.
3. CONTEXT otherwise: project facts, architecture, and judgements that have not recurred
   yet (they are promoted to WEIGHTS when their cluster reaches the bar).

Optional: with the setting `allocator = "xai"`, xAI proposes {checkable, behavioural}
(`llm.py`); the spec still has to compile for a CODE guard to exist, and recurrence is
always counted locally.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from continual_lsp.config import Settings
from continual_lsp.lanes import llm
from continual_lsp.lanes.compile import checkable_cues, compile_guard, llm_guard_spec
from continual_lsp.lanes.context import Cue, make_cue
from continual_lsp.lanes.features import (
    BEHAVIOUR_WORDS,
    DESCRIPTIVE_START,
    FACT_WORDS,
    MODAL,
    cjk_fraction,
    instructs,
    strip_markup,
)
from continual_lsp.lanes.guards.spec import (
    CommandRule,
    ContentRule,
    GuardSpec,
    PathRule,
    SizeRule,
    ToolRule,
    rule_summary,
)
from continual_lsp.lanes.reading import Reading, Situation, read
from continual_lsp.lanes.routing.clusters import ClusterAssignment, assign_cluster
from continual_lsp.lanes.routing.detector import Detection, detect
from continual_lsp.lanes.routing.embed import Embedder, get_embedder
from continual_lsp.lanes.routing.learned import shipped_heads
from continual_lsp.lanes.scope import TASK_KIND, TaskScope, task_scope
from continual_lsp.lanes.weights import on_weights_decision, record_situation
from continual_lsp.store.db import Store

LaneName = Literal["CODE", "WEIGHTS", "CONTEXT", "NONE"]
Kind = Literal[
    "tool_choice",
    "file_scope",
    "command",
    "content_style",
    "process",
    "communication",
    "project_fact",
    "architecture",
    "testing",
    "other",
]

CHECKABLE_THRESHOLD = 0.8  # the head alone must be quite sure: a wrong CODE costs a guard


class LaneDecision(BaseModel):
    """What the allocator decided and why; no side effects."""

    lane: LaneName
    reason: str
    confidence: float = Field(ge=0.0, le=1.0)
    kind: Kind = "other"
    checkable: bool = False
    behavioural: bool = False
    spec: dict[str, Any] = Field(default_factory=dict)  # GuardSpec dump, or {} / pending
    cue: Cue = Field(default_factory=Cue)
    recurrence: int = 1
    features: dict[str, float] = Field(default_factory=dict)  # numbers only: poolable


class LaneItem(BaseModel):
    """A routed correction as stored (mirrors the `lane_items` row)."""

    id: str
    text: str
    lane: LaneName
    reason: str
    confidence: float = 1.0
    kind: str | None = None
    cluster_id: str | None = None
    cue: dict[str, Any] = Field(default_factory=dict)
    spec: dict[str, Any] = Field(default_factory=dict)
    source: str | None = None
    active: bool = True
    created_at: float = Field(default_factory=time.time)
    recurrence: int = 1

    @classmethod
    def from_row(cls, row: dict[str, Any], recurrence: int = 1) -> LaneItem:
        return cls(
            **{k: row[k] for k in cls.model_fields if k in row and k != "recurrence"},
            recurrence=recurrence,
        )


_KIND_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("testing", re.compile(r"\b(tests?|testing|coverage|assert\w*|mocks?|fixtures?)\b", re.I)),
    (
        "communication",
        re.compile(
            r"\b(answer|explain|ask|summari[sz]e|say|tell|reply|respond|question|"
            r"commit messages?|speak|talk|对话)\b",
            re.I,
        ),
    ),
    (
        "architecture",
        re.compile(
            r"\b(api|endpoints?|layers?|modules?|architecture|shared|breaking|"
            r"services?|dependency|depend)\b",
            re.I,
        ),
    ),
    (
        "content_style",
        re.compile(
            r"\b(comments?|naming|names?|case|style|dry|format\w*|lines|functions?|"
            r"components?|variables?|titles?|headings?)\b",
            re.I,
        ),
    ),
    ("process", re.compile(r"\b(before|after|first|when|changes?|refactors?|plan)\b", re.I)),
]


def classify_kind(text: str, spec: GuardSpec | None, behavioural: bool) -> Kind:
    if spec is not None:
        kinds = {type(r) for r in spec.rules}
        if CommandRule in kinds:
            rewrites = [r for r in spec.rules if isinstance(r, CommandRule) and r.replace]
            return "tool_choice" if rewrites and len(spec.rules) <= 2 else "command"
        if PathRule in kinds:
            return "file_scope"
        if ToolRule in kinds:
            return "tool_choice"
        if ContentRule in kinds or SizeRule in kinds:
            return "content_style"
    for kind, pat in _KIND_RULES:
        if pat.search(text):
            return kind  # type: ignore[return-value]
    return "process" if behavioural else "project_fact"


def behaviour_score(reading: Reading) -> float:
    """Rule prior: does the text tell the agent how to act (vs state a fact)?"""
    t = reading.plain
    score = 0.5
    if MODAL.search(t):
        score += 0.25
    score += 0.08 * min(len(BEHAVIOUR_WORDS.findall(t)), 3)
    score -= 0.1 * min(len(FACT_WORDS.findall(t)), 3)
    heading = re.match(r"^\s*(\*\*[^*]+\*\*|`[^`]+`)\s*[:—–-]\s+(?P<rest>.*)", reading.text)
    # "**Config**: defaults in …" / "`yarn dev` - starts …": a glossary line; a bold
    # heading over an instruction ("**Barrel exports**: Use `index.ts` …") is a rule's title.
    if heading and not (
        heading.group(1).startswith("**") and instructs(strip_markup(heading.group("rest")))
    ):
        score -= 0.3
    if DESCRIPTIVE_START.match(t):
        score -= 0.3  # "Scheduler reads …", "The crates follow …": describes the system
    return float(min(max(score, 0.0), 1.0))


def _head_probabilities(reading: Reading, emb: Embedder) -> tuple[float | None, float | None]:
    """(p_checkable, p_behavioural) from the shipped heads; None where they don't fit `emb`."""
    hand = reading.features
    heads = shipped_heads()
    if heads is None or heads.dim != emb.dim + len(hand):
        return None, None
    x = np.concatenate([emb.embed([reading.text])[0], hand])[None, :]
    return float(heads.prob("checkable", x)[0]), float(heads.prob("behavioural", x)[0])


def _features(
    spec: GuardSpec | None, p_check: float | None, behav_p: float, recurrence: int
) -> dict[str, float]:
    return {
        "compiled": float(spec is not None),
        "p_checkable": -1.0 if p_check is None else round(p_check, 4),
        "p_behavioural": round(behav_p, 4),
        "recurrence": float(recurrence),
        "n_rules": float(len(spec.rules)) if spec else 0.0,
    }


@dataclass(frozen=True)
class _Assessment:
    """What `allocate` made of one correction; every decision it makes carries it."""

    text: str
    behavioural: bool
    cue: Cue
    recurrence: int
    features: dict[str, float]

    def decision(
        self,
        lane: LaneName,
        reason: str,
        confidence: float,
        kind: Kind,
        checkable: bool,
        spec: GuardSpec | None = None,
    ) -> LaneDecision:
        return LaneDecision(
            lane=lane,
            reason=reason,
            confidence=confidence,
            kind=kind,
            checkable=checkable,
            behavioural=self.behavioural,
            spec=spec.model_dump() if spec is not None else {},
            cue=self.cue,
            recurrence=self.recurrence,
            features=self.features,
        )


def _code_decision(
    assessed: _Assessment, spec: GuardSpec, generated_for: list[str] | None
) -> LaneDecision:
    """CODE with a compiled `spec`, or (`generated_for`: the cues) one the LLM wrote."""
    if generated_for is None:
        reason = (
            "A guard compiled from this passed its self-check and runs on every proposal: "
            + "; ".join(rule_summary(r) for r in spec.rules)[:400]
        )
    else:
        what = f" ({', '.join(generated_for)})" if generated_for else ""
        reason = (
            f"A deterministic check can guarantee this{what}; a generated guard "
            "runs on every proposal in a sandboxed subprocess."
        )
    compiled = generated_for is None
    kind = classify_kind(assessed.text, spec if compiled else None, assessed.behavioural)
    return assessed.decision("CODE", reason, 0.9 if compiled else 0.7, kind, True, spec)


def _weights_reason(
    kind: str, recurrence: int, settings: Settings, recurrence_met: bool | None
) -> str:
    if recurrence_met is None:
        return (
            f"A behavioural judgement ({kind.replace('_', ' ')}) that has recurred "
            f"{recurrence} time(s) (bar: {settings.weights_recurrence}); it is distilled "
            "into the adapter and leaves the context once the adapter passes its gate."
        )
    return (
        f"A behavioural judgement ({kind.replace('_', ' ')}) that recurs; "
        "distilled into the adapter."
    )


def _context_reason(behavioural: bool, recurrence: int, settings: Settings) -> str:
    if behavioural:
        return (
            f"A behavioural judgement, seen {recurrence} time(s); kept as a cued bullet until it "
            f"recurs {settings.weights_recurrence} times."
        )
    return "Situational knowledge about the project; kept as a bullet shown when its cue matches."


def allocate(
    reading: Reading,
    recurrence: int,
    settings: Settings | None = None,
    *,
    situation: Situation | None = None,
    use_llm: bool | None = None,
    embedder: Embedder | None = None,
    recurrence_met: bool | None = None,
) -> LaneDecision:
    """Decide the lane of one correction (already detected as one). Pure: no store.

    `recurrence_met` overrides the count test (the dev bench uses it: its labels mark
    WEIGHTS for rules that would plausibly recur, without counts).
    """
    settings = settings or Settings()
    text = reading.text
    spec = compile_guard(reading, situation)
    p_check, p_behav = _head_probabilities(reading, embedder or get_embedder())
    b_rule = behaviour_score(reading)
    english = cjk_fraction(text) <= 0.3  # MiniLM's vote on mostly-CJK text is noise
    if not english:
        p_check = p_behav = None
    behav_p = b_rule if p_behav is None else 0.4 * b_rule + 0.6 * p_behav
    cues = checkable_cues(reading)
    llm_answer = None
    if spec is None and use_llm is not False:
        # Only when the compiler found no guard: a compiled spec already settles CODE.
        answer = llm.ask("allocate", text, settings)
        llm_answer = answer if isinstance(answer, llm.Allocation) else None
    if llm_answer is not None:
        behav_p = 1.0 if llm_answer.behavioural else 0.0
        p_check = 1.0 if llm_answer.checkable else 0.0
    behavioural = behav_p >= 0.5
    met = recurrence >= settings.weights_recurrence if recurrence_met is None else recurrence_met
    features = _features(spec, p_check, behav_p, recurrence)
    read_as = _Assessment(text, behavioural, make_cue(reading, situation), recurrence, features)
    if spec is not None:
        return _code_decision(read_as, spec, None)
    proposed = bool(cues) or (p_check is not None and p_check >= CHECKABLE_THRESHOLD)
    if proposed:
        # The classifier proposes, the compiler disposes: CODE only with a guard that
        # exists. The optional LLM guard writer is the last try.
        generated = llm_guard_spec(text, settings) if use_llm is not False else None
        if generated is not None:
            return _code_decision(read_as, generated, cues)
    kind = classify_kind(text, None, behavioural)
    conf = round(float(abs(behav_p - 0.5) * 2 * 0.5 + 0.5), 3)
    no_guard = (
        " A function could check it, but no guard compiled from the text; attach one to "
        "move it to CODE."
        if proposed
        else ""
    )
    # A behavioural judgement that recurs goes to WEIGHTS; the rest is cued CONTEXT.
    weights = behavioural and met
    reason = (
        _weights_reason(kind, recurrence, settings, recurrence_met)
        if weights
        else _context_reason(behavioural, recurrence, settings)
    )
    return read_as.decision(
        "WEIGHTS" if weights else "CONTEXT", reason + no_guard, conf, kind, proposed
    )


def route_correction(
    store: Store,
    text: str,
    situation: Situation | None = None,
    settings: Settings | None = None,
    *,
    denial: bool = False,
    source: str | None = None,
    use_llm: bool | None = None,
    embedder: Embedder | None = None,
    standing: bool = False,
) -> LaneItem | None:
    """Detect, cluster, allocate and persist one correction; None when it is not one.

    Before the lanes, a correction made on a proposal (`situation` given) that speaks of
    that change only is task-scoped (`scope.py`): stored as a `NONE`/"task" item that no
    guard or bullet reads, unclustered; `standing=True` (promotion) skips that reading.

    A correction that joins a cluster with an active item in the same lane updates that
    item (recurrence, reason) instead of adding a duplicate bullet or guard; a cluster
    whose recurrence reaches the bar moves its CONTEXT item to WEIGHTS.
    """
    settings = settings or Settings()
    text = text.strip()
    if not text:
        return None
    reading = read(text)
    detection: Detection = detect(
        reading, denial=denial, use_llm=use_llm, embedder=embedder, settings=settings
    )
    if not detection.is_correction:
        store.append_event("not_a_correction", {"confidence": detection.confidence})
        return None
    if situation is not None and not standing:
        scope = task_scope(reading)
        if scope.task_scoped:
            return _persist_task(store, text, scope, situation, source)
    cluster = assign_cluster(store, text, settings, embedder=embedder)
    decision = allocate(
        reading, cluster.count, settings, situation=situation, use_llm=use_llm, embedder=embedder
    )
    started = time.time()
    lane_item = _persist(store, text, decision, cluster, source)
    # The ledger's `recurredAfter`: corrections that came back to an item (or its cluster)
    # after it existed; the one that made the item is not one of them.
    store.append_event(
        "correction_clustered",
        {
            "clusterId": cluster.cluster_id,
            "itemId": lane_item.id,
            "created": lane_item.created_at >= started,
        },
    )
    if situation is not None and (situation.task_text or situation.tool):
        record_situation(store, cluster.cluster_id, lane_item.id, situation)
    if lane_item.lane == "WEIGHTS":
        on_weights_decision(store, lane_item, text, settings)
    return lane_item


def _persist_task(
    store: Store, text: str, scope: TaskScope, situation: Situation, source: str | None
) -> LaneItem:
    """A task-scoped correction: kept (for the ledger and promotion), acting nowhere."""
    item_id = store.add_lane_item(
        {
            "text": text,
            "lane": "NONE",
            "reason": scope.reason(),
            "kind": TASK_KIND,
            "spec": {"task": {"cues": scope.cues, "context": situation.task_record()}},
            "source": source,
        }
    )
    store.append_event("task_scoped", {"itemId": item_id, "cues": scope.cues})
    row = store.lane_item(item_id)
    assert row is not None
    return LaneItem.from_row(row)


def _persist(
    store: Store,
    text: str,
    decision: LaneDecision,
    cluster: ClusterAssignment,
    source: str | None,
) -> LaneItem:
    active = store.lane_items(active_only=True)
    same_cluster = [it for it in active if it["cluster_id"] == cluster.cluster_id]
    existing = [it for it in same_cluster if it["lane"] in ("CONTEXT", "WEIGHTS")]
    # The same checks under other words (each correction names its own example) are the
    # same guard, whichever cluster it was filed under.
    rules = (decision.spec or {}).get("rules")
    code = [
        it
        for it in active
        if rules and it["lane"] == "CODE" and (it["spec"] or {}).get("rules") == rules
    ]
    if decision.lane == "CODE" and code:
        return LaneItem.from_row(code[0], cluster.count)  # the same guard already runs
    if decision.lane == "WEIGHTS" and existing:
        item = existing[0]
        if item["lane"] != "WEIGHTS":
            store.update_lane_item(
                item["id"], lane="WEIGHTS", reason=decision.reason, confidence=decision.confidence
            )
        else:
            store.update_lane_item(item["id"], reason=decision.reason)
        row = store.lane_item(item["id"])
        assert row is not None
        return LaneItem.from_row(row, cluster.count)
    existing_context = [it for it in existing if it["lane"] == "CONTEXT"]
    if decision.lane == "CONTEXT" and existing_context:
        row = existing_context[0]
        store.update_lane_item(row["id"], reason=decision.reason)
        fresh = store.lane_item(row["id"])
        assert fresh is not None
        return LaneItem.from_row(fresh, cluster.count)
    item_id = store.add_lane_item(
        {
            "text": text,
            "lane": decision.lane,
            "reason": decision.reason,
            "confidence": decision.confidence,
            "kind": decision.kind,
            "cluster_id": cluster.cluster_id,
            "cue": decision.cue.model_dump(),
            "spec": decision.spec,
            "source": source,
        }
    )
    row = store.lane_item(item_id)
    assert row is not None
    return LaneItem.from_row(row, cluster.count)
