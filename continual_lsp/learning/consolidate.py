"""Consolidation: distil one WEIGHTS cluster's principle into the adapter, behind the gate.

Run by the training worker for a `consolidate` job that the weights lane queued; the
situations and the pure gate are `continual_lsp.learning.gate`.

`consolidate(policy, store, cluster_id, settings)`: situations = logged ones + simple
synthesised variations of their task text; split into train / held-out; teacher = prompt
*with* the principle, student = without; the targets are the teacher-endorsed calls (the
reviewer's demonstration, else the teacher's own greedy call when it differs from the
corrected one); a few LoRA steps give the candidate. `gate(incumbent, candidate)` promotes
only a candidate that beats the incumbent on held-out compliance (logprob margin of the
compliant over the corrected call, in the student prompt, i.e. *without* the bullet) and
does not raise drift (mean per-token KL estimate to the base on a fixed unrelated prompt
set) beyond a bound. Promotion: the adapter becomes the current version and the item's
bullet leaves the context (the tax drops). Discard: the incumbent is restored. Every
version is saved and registered either way.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from continual_lsp.config import Settings
from continual_lsp.learning.gate import EvalMetrics, GateExample, gate, situations_for_cluster
from continual_lsp.policy.base import Datum, Message, Policy, SampleParams
from continual_lsp.store.db import Store, new_id
from continual_lsp.tools.base import ToolCall

# Unrelated tasks with their natural first call: the drift probe. Fixed on purpose, so
# drift numbers are comparable between versions.
DRIFT_PROBES: list[tuple[str, ToolCall]] = [
    ("Show me the README.", ToolCall(tool="read", arguments={"path": "README.md"})),
    ("List the Python files.", ToolCall(tool="glob", arguments={"pat": "**/*.py"})),
    ("Where is TODO mentioned?", ToolCall(tool="grep", arguments={"pat": "TODO"})),
    ("Run the test suite.", ToolCall(tool="bash", arguments={"cmd": "pytest -q"})),
]


class ConsolidationResult(BaseModel):
    status: Literal["promoted", "discarded", "skipped"]
    reason: str
    cluster_id: str
    incumbent: EvalMetrics | None = None
    candidate: EvalMetrics | None = None
    adapter: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)


# -- scoring ----------------------------------------------------------------------------------


def _prompt(policy: Policy, task: str, principle: str | None) -> list[int]:
    messages = []
    if principle:
        messages.append(Message(role="system", content=f"Rule from your reviewer: {principle}"))
    messages.append(Message(role="user", content=task))
    return policy.renderer.render_prompt(messages)


def evaluate(
    policy: Policy,
    held_out: list[GateExample],
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
        refs.append(policy.reference_logprobs(prompt, tokens))
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


def _targets(policy: Policy, s: GateExample, principle: str) -> ToolCall | None:
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
        return _skipped(store, cluster_id, "no active WEIGHTS item")
    item = items[0]
    situations = situations_for_cluster(store, cluster_id, variations)
    scorable = [s for s in situations if s.compliant is not None and s.violating is not None]
    if len(scorable) < 2:
        return _skipped(
            store,
            cluster_id,
            "fewer than two situations with both a corrected and a compliant call",
        )
    # Held-out: every third scorable situation (at least one), never trained on.
    held_out = scorable[::3]
    train = [s for s in situations if s not in held_out]
    incumbent_name = policy.adapter_version
    stamp = time.strftime("%Y%m%d-%H%M%S") + "-" + new_id("v")[2:8]
    snapshot = policy.save_adapter(f"incumbent-{cluster_id}-{stamp}")
    inc_metrics, reference = evaluate(policy, held_out)
    batch = _teacher_batch(policy, train, _principle(store, cluster_id, item))
    if not batch:
        return _skipped(store, cluster_id, "no teacher targets")
    train_loss = []
    for _ in range(steps):
        m = policy.train_step(
            batch, "cross_entropy", lr or settings.learning_rate, kl_coef=settings.kl_coef
        )
        train_loss.append(m.loss)
    cand_metrics, _ = evaluate(policy, held_out, reference)
    decision = gate(
        inc_metrics, cand_metrics, min_gain=min_gain, max_drift_increase=max_drift_increase
    )
    name = f"consolidate-{cluster_id}-{stamp}"
    metrics = {
        "clusterId": cluster_id,
        "incumbent": inc_metrics.model_dump(),
        "candidate": cand_metrics.model_dump(),
        "trainLoss": train_loss,
        "gate": decision.reason,
    }
    _register(policy, store, name, metrics, decision.promote)
    if decision.promote:
        spec = dict(item.get("spec") or {})
        spec.update({"promoted": name, "promoted_at": time.time()})
        store.update_lane_item(
            item["id"],
            spec=spec,
            reason=f"Consolidated into adapter {name}: {decision.reason}; the bullet left the context.",
        )
    else:
        policy.load_adapter(snapshot.path)
        if not policy.manages_versions:  # the snapshot's name is not the served version's
            policy.adapter_version = incumbent_name  # type: ignore[misc]
    result = ConsolidationResult(
        status="promoted" if decision.promote else "discarded", reason=decision.reason,
        cluster_id=cluster_id, incumbent=inc_metrics, candidate=cand_metrics, adapter=name,
        metrics=metrics,
    )  # fmt: skip
    return _done(store, result)


def _principle(store: Store, cluster_id: str, item: dict[str, Any]) -> str:
    """The rule the teacher is shown: the item's own words, else its cluster's label."""
    if len(item["text"]) <= 300:
        return str(item["text"])
    return next((c["label"] for c in store.clusters() if c["id"] == cluster_id), item["text"])


def _teacher_batch(policy: Policy, train: list[GateExample], principle: str) -> list[Datum]:
    """The student prompt (no bullet) and the teacher-endorsed call of each situation."""
    batch: list[Datum] = []
    for s in train:
        target = _targets(policy, s, principle)
        if target is not None:
            batch.append(
                Datum(
                    prompt_tokens=_prompt(policy, s.task, None),
                    completion_tokens=policy.renderer.render_call(target),
                )
            )
    return batch


def _register(
    policy: Policy, store: Store, name: str, metrics: dict[str, Any], promote: bool
) -> None:
    """Save the candidate as version `name`, served only if promoted (kept either way)."""
    info = policy.save_adapter(name)
    current = store.current_adapter()
    parent = int(current["version"]) if current else None
    store.add_adapter(
        name, info.path, info.sha256, parent, metrics, source="consolidation", active=promote
    )


def _skipped(store: Store, cluster_id: str, reason: str) -> ConsolidationResult:
    return _done(store, ConsolidationResult(status="skipped", reason=reason, cluster_id=cluster_id))


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
