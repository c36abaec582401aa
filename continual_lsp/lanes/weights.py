"""Weights lane: distil a recurring principle into the adapter, behind a held-out gate.

Flow:
1. Every routed correction leaves a `lane_situation` event (cluster, task text, the
   corrected call, the demonstration when there is one): the raw material.
2. When a cluster is WEIGHTS and has gathered `Settings.consolidation_depth` situations
   since its last consolidation, a `consolidate` job is queued (depth, not clock).
3. `consolidate(policy, store, cluster_id, settings)` (run by the training worker):
   situations = logged ones + simple synthesised variations of their task text; split
   into train / held-out; teacher = prompt *with* the principle, student = without;
   the targets are the teacher-endorsed calls (the reviewer's demonstration, else the
   teacher's own greedy call when it differs from the corrected one); a few LoRA steps
   give the candidate.
4. `gate(incumbent, candidate)` — a pure function of numbers — promotes only a candidate
   that beats the incumbent on held-out compliance (logprob margin of the compliant over
   the corrected call, in the student prompt, i.e. *without* the bullet) and does not
   raise drift (mean per-token KL estimate to the base on a fixed unrelated prompt set)
   beyond a bound. Promotion: the adapter becomes the current version and the item's
   bullet leaves the context (the tax drops). Discard: the incumbent is restored. Every
   version is saved and registered either way.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from continual_lsp.config import Settings
from continual_lsp.policy.base import Datum, Message, Policy, SampleParams
from continual_lsp.store.db import Store, new_id
from continual_lsp.tools.base import ToolCall

log = logging.getLogger(__name__)

JOB_KIND = "consolidate"

# Unrelated tasks with their natural first call: the drift probe. Fixed on purpose, so
# drift numbers are comparable between versions.
DRIFT_PROBES: list[tuple[str, ToolCall]] = [
    ("Show me the README.", ToolCall(tool="read", arguments={"path": "README.md"})),
    ("List the Python files.", ToolCall(tool="glob", arguments={"pat": "**/*.py"})),
    ("Where is TODO mentioned?", ToolCall(tool="grep", arguments={"pat": "TODO"})),
    ("Run the test suite.", ToolCall(tool="bash", arguments={"cmd": "pytest -q"})),
]

_VARIATIONS = [
    "{task}",
    "Please {task_lc}",
    "{task} Keep it short.",
    "Next step: {task_lc}",
    "I need this done: {task_lc}",
]


class Situation(BaseModel):
    task: str
    compliant: ToolCall | None = None  # what the reviewer wanted (demonstration)
    violating: ToolCall | None = None  # the call that was corrected
    origin: Literal["log", "synth"] = "log"


class EvalMetrics(BaseModel):
    compliance: float  # mean logprob margin (compliant − violating) on held-out, no bullet
    compliance_rate: float = 0.0  # fraction of held-out situations with margin > 0
    drift: float = 0.0  # mean per-token KL estimate to the base on DRIFT_PROBES
    n: int = 0


class GateDecision(BaseModel):
    promote: bool
    reason: str


class ConsolidationResult(BaseModel):
    status: Literal["promoted", "discarded", "skipped"]
    reason: str
    cluster_id: str
    incumbent: EvalMetrics | None = None
    candidate: EvalMetrics | None = None
    adapter: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)


# -- the gate: pure, unit-testable ------------------------------------------------------------


def gate(
    incumbent: EvalMetrics,
    candidate: EvalMetrics,
    *,
    min_gain: float = 0.0,
    max_drift_increase: float = 0.05,
) -> GateDecision:
    """Promote iff held-out compliance improves by more than `min_gain` and drift does
    not rise by more than `max_drift_increase` (nats per token)."""
    gain = candidate.compliance - incumbent.compliance
    drift_up = candidate.drift - incumbent.drift
    if gain <= min_gain:
        return GateDecision(
            promote=False,
            reason=f"held-out compliance did not improve ({candidate.compliance:.3f} vs "
            f"incumbent {incumbent.compliance:.3f})",
        )
    if drift_up > max_drift_increase:
        return GateDecision(
            promote=False,
            reason=f"drift rose by {drift_up:.3f} nats/token (bound {max_drift_increase:.3f})",
        )
    return GateDecision(
        promote=True,
        reason=f"held-out compliance {incumbent.compliance:.3f} → {candidate.compliance:.3f}, "
        f"drift {incumbent.drift:.3f} → {candidate.drift:.3f}",
    )


# -- situations -------------------------------------------------------------------------------


def record_situation(store: Store, cluster_id: str, item_id: str, context: dict[str, Any]) -> None:
    """Log where a correction happened (no new text beyond what the log already holds)."""
    payload: dict[str, Any] = {"clusterId": cluster_id, "itemId": item_id}
    for key in ("task_text", "tool", "arguments", "demonstration"):
        if context.get(key) is not None:
            payload[key] = context[key]
    store.append_event("lane_situation", payload, proposal_id=context.get("proposal_id"))


def _call(tool: Any, args: Any) -> ToolCall | None:
    if not tool or not isinstance(args, dict):
        return None
    try:
        call = ToolCall(tool=tool, arguments=args)
        call.parsed()
        return call
    except ValueError:
        return None


def _approved(store: Store, event: dict[str, Any]) -> ToolCall | None:
    """What the reviewer accepted in a logged situation: the edited call it carries, else
    the retry approved after that denial (known only once the reviewer approved one)."""
    demo = event["payload"].get("demonstration")
    if not demo and event.get("proposal_id"):
        demo = store.approved_retry(event["proposal_id"])
    demo = demo or {}
    return _call(demo.get("tool"), demo.get("arguments"))


def cluster_demonstrations(
    store: Store, cluster_id: str, *, exclude: str | None = None, limit: int = 2
) -> list[ToolCall]:
    """Calls the reviewer accepted after earlier corrections of this cluster, newest first
    (DESIGN §4: a denial with no demonstration of its own shows the teacher these)."""
    found: list[ToolCall] = []
    for ev in reversed(store.events(kind="lane_situation", cluster_id=cluster_id)):
        if ev.get("proposal_id") == exclude:
            continue
        call = _approved(store, ev)
        if call is not None and call not in found:
            found.append(call)
            if len(found) == limit:
                break
    return found


def situations_for_cluster(store: Store, cluster_id: str, variations: int = 2) -> list[Situation]:
    logged: list[Situation] = []
    for ev in store.events(kind="lane_situation", cluster_id=cluster_id):
        p = ev["payload"]
        if not p.get("task_text"):
            continue
        logged.append(
            Situation(
                task=str(p["task_text"]),
                violating=_call(p.get("tool"), p.get("arguments")),
                compliant=_approved(store, ev),
            )
        )
    out = list(logged)
    for s in logged:
        lc = s.task[:1].lower() + s.task[1:]
        for template in _VARIATIONS[1 : 1 + variations]:
            out.append(
                s.model_copy(
                    update={"task": template.format(task=s.task, task_lc=lc), "origin": "synth"}
                )
            )
    return out


def pending_situations(store: Store, cluster_id: str) -> int:
    """Situations logged since this cluster's last consolidation."""
    last = 0.0
    for ev in store.events(kind="consolidation", cluster_id=cluster_id):
        last = max(last, float(ev["ts"]))
    return sum(
        1
        for ev in store.events(kind="lane_situation", cluster_id=cluster_id)
        if float(ev["ts"]) > last
    )


def _job_pending(store: Store, cluster_id: str) -> bool:
    for ev in store.events(kind="consolidate_queued", cluster_id=cluster_id):
        job = store.job(int(ev["payload"]["jobId"]))
        if job is not None and job["status"] in ("pending", "running"):
            return True
    return False


def on_weights_decision(
    store: Store, item: Any, text: str, context: dict[str, Any], settings: Settings
) -> int | None:
    """Called by the allocator for a WEIGHTS item; queues consolidation by depth."""
    cluster_id = item.cluster_id
    if cluster_id is None:
        return None
    if pending_situations(store, cluster_id) < settings.consolidation_depth:
        return None
    if _job_pending(store, cluster_id):
        return None
    job_id = store.enqueue_job(JOB_KIND, {"clusterId": cluster_id, "itemId": item.id})
    store.append_event("consolidate_queued", {"clusterId": cluster_id, "jobId": job_id})
    return job_id


# -- scoring ----------------------------------------------------------------------------------


def _prompt(policy: Policy, task: str, principle: str | None) -> list[int]:
    messages = []
    if principle:
        messages.append(Message(role="system", content=f"Rule from your reviewer: {principle}"))
    messages.append(Message(role="user", content=task))
    return policy.renderer.render_prompt(messages)


def _ref_logprobs(policy: Policy, prompt: list[int], tokens: list[int]) -> list[float]:
    ref = getattr(policy, "reference_logprobs", None)
    return ref(prompt, tokens) if callable(ref) else policy.logprobs(prompt, tokens)


def evaluate(
    policy: Policy,
    held_out: list[Situation],
    drift_reference: list[list[float]] | None = None,
) -> tuple[EvalMetrics, list[list[float]]]:
    """Compliance (student prompt, no bullet) and drift of the policy's current weights."""
    margins: list[float] = []
    for s in held_out:
        if s.compliant is None or s.violating is None:
            continue
        prompt = _prompt(policy, s.task, None)
        good = sum(policy.logprobs(prompt, policy.renderer.render_call(s.compliant)))
        bad = sum(policy.logprobs(prompt, policy.renderer.render_call(s.violating)))
        margins.append(good - bad)
    current: list[list[float]] = []
    refs: list[list[float]] = []
    for task, call in DRIFT_PROBES:
        prompt = _prompt(policy, task, None)
        tokens = policy.renderer.render_call(call)
        current.append(policy.logprobs(prompt, tokens))
        refs.append(_ref_logprobs(policy, prompt, tokens))
    reference = drift_reference or refs
    diffs = [
        r - c
        for ref, cur in zip(reference, current, strict=True)
        for r, c in zip(ref, cur, strict=True)
    ]
    drift = max(0.0, sum(diffs) / max(len(diffs), 1))
    n = len(margins)
    return (
        EvalMetrics(
            compliance=sum(margins) / n if n else 0.0,
            compliance_rate=sum(m > 0 for m in margins) / n if n else 0.0,
            drift=drift,
            n=n,
        ),
        reference,
    )


def _targets(policy: Policy, s: Situation, principle: str) -> ToolCall | None:
    """The teacher-endorsed call: the demonstration, else the teacher's own greedy call."""
    if s.compliant is not None:
        return s.compliant
    try:
        done = policy.sample(_prompt(policy, s.task, principle), SampleParams(max_tokens=128))
        call = policy.renderer.parse_call(done.text)
    except ValueError:
        return None
    return None if s.violating is not None and call == s.violating else call


# -- the driver -------------------------------------------------------------------------------


def consolidate(
    policy: Policy,
    store: Store,
    cluster_id: str,
    settings: Settings | None = None,
    *,
    steps: int = 4,
    lr: float | None = None,
    min_gain: float = 0.0,
    max_drift_increase: float = 0.05,
    variations: int = 2,
) -> ConsolidationResult:
    """Train a candidate for one cluster's principle and promote or discard it.

    `variations` synthesised rephrasings per logged situation (0: logged ones only).
    """
    settings = settings or Settings()
    items = [
        it
        for it in store.lane_items(lane="WEIGHTS", active_only=True)
        if it["cluster_id"] == cluster_id
    ]
    if not items:
        return _done(
            store,
            ConsolidationResult(
                status="skipped", reason="no active WEIGHTS item", cluster_id=cluster_id
            ),
        )
    item = items[0]
    principle = next((c["label"] for c in store.clusters() if c["id"] == cluster_id), item["text"])
    principle = item["text"] if len(item["text"]) <= 300 else principle
    situations = situations_for_cluster(store, cluster_id, variations)
    scorable = [s for s in situations if s.compliant is not None and s.violating is not None]
    if len(scorable) < 2:
        return _done(
            store,
            ConsolidationResult(
                status="skipped",
                reason="fewer than two situations with both a corrected and a compliant call",
                cluster_id=cluster_id,
            ),
        )
    # Held-out: every third scorable situation (at least one), never trained on.
    held_out = scorable[::3]
    train = [s for s in situations if s not in held_out]
    incumbent_name = policy.adapter_version
    stamp = time.strftime("%Y%m%d-%H%M%S") + "-" + new_id("v")[2:8]
    snapshot = policy.save_adapter(f"incumbent-{cluster_id}-{stamp}")
    inc_metrics, reference = evaluate(policy, held_out)

    batch: list[Datum] = []
    for s in train:
        target = _targets(policy, s, principle)
        if target is None:
            continue
        batch.append(
            Datum(
                prompt_tokens=_prompt(policy, s.task, None),
                completion_tokens=policy.renderer.render_call(target),
            )
        )
    if not batch:
        return _done(
            store,
            ConsolidationResult(
                status="skipped", reason="no teacher targets", cluster_id=cluster_id
            ),
        )
    train_metrics = []
    for _ in range(steps):
        m = policy.train_step(
            batch, "cross_entropy", lr or settings.learning_rate, kl_coef=settings.kl_coef
        )
        train_metrics.append(m.loss)
    cand_metrics, _ = evaluate(policy, held_out, reference)
    decision = gate(
        inc_metrics, cand_metrics, min_gain=min_gain, max_drift_increase=max_drift_increase
    )
    name = f"consolidate-{cluster_id}-{stamp}"
    info = policy.save_adapter(name)
    current = store.current_adapter()
    parent = int(current["version"]) if current else None
    metrics = {
        "clusterId": cluster_id,
        "incumbent": inc_metrics.model_dump(),
        "candidate": cand_metrics.model_dump(),
        "trainLoss": train_metrics,
        "gate": decision.reason,
    }
    store.add_adapter(
        name,
        info.path,
        info.sha256,
        parent,
        metrics,
        source="consolidation",
        active=decision.promote,
    )
    if decision.promote:
        spec = dict(item.get("spec") or {})
        spec.update({"promoted": name, "promoted_at": time.time()})
        store.update_lane_item(
            item["id"],
            spec=spec,
            reason=f"Consolidated into adapter {name}: {decision.reason}; the bullet left the context.",
        )
        result = ConsolidationResult(
            status="promoted", reason=decision.reason, cluster_id=cluster_id,
            incumbent=inc_metrics, candidate=cand_metrics, adapter=name, metrics=metrics,
        )  # fmt: skip
    else:
        policy.load_adapter(snapshot.path)
        if hasattr(policy, "adapter_version"):
            with contextlib.suppress(AttributeError):  # a read-only property elsewhere
                policy.adapter_version = incumbent_name  # type: ignore[misc]
        result = ConsolidationResult(
            status="discarded", reason=decision.reason, cluster_id=cluster_id,
            incumbent=inc_metrics, candidate=cand_metrics, adapter=name, metrics=metrics,
        )  # fmt: skip
    return _done(store, result)


def _done(store: Store, result: ConsolidationResult) -> ConsolidationResult:
    store.append_event(
        "consolidation",
        {
            "clusterId": result.cluster_id,
            "status": result.status,
            "reason": result.reason,
            "adapter": result.adapter,
        },
    )
    return result


def run_consolidation_job(
    policy: Policy, store: Store, job: dict[str, Any], settings: Settings
) -> ConsolidationResult:
    """For the training worker: one claimed `consolidate` job."""
    return consolidate(policy, store, str(job["payload"]["clusterId"]), settings)
