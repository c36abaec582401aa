"""What consolidation learns from: the situations the weights lane logged, and the gate.

The lane (`continual_lsp.lanes.weights`) leaves a `lane_situation` event for every
routed correction; this module reads them back as `GateExample`s (plus simple variations of
their task text), finds the calls the reviewer accepted after a cluster's corrections (the
teacher's examples for a denial without a demonstration, DESIGN §4), and holds the pure
gate that promotes a consolidated adapter. The store's events are the only thing the lane
and learning share.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from continual_lsp.store.db import Store
from continual_lsp.tools.base import ToolCall

_VARIATIONS = [
    "{task}",
    "Please {task_lc}",
    "{task} Keep it short.",
    "Next step: {task_lc}",
    "I need this done: {task_lc}",
]


class GateExample(BaseModel):
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


def situations_for_cluster(store: Store, cluster_id: str, variations: int = 2) -> list[GateExample]:
    logged: list[GateExample] = []
    for ev in store.events(kind="lane_situation", cluster_id=cluster_id):
        p = ev["payload"]
        if not p.get("task_text"):
            continue
        logged.append(
            GateExample(
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
