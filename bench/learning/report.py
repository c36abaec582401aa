"""Markdown table, goal checks and PNG plots from the suite's points."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.learning.scenarios import SCENARIOS
from bench.learning.suite import METHODS, TRAINED, Point

COLORS = {
    "sdpo_token": "tab:blue",
    "sdpo_topk": "tab:purple",
    "sft": "tab:red",
    "context": "tab:green",
    "none": "tab:gray",
}


def _fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def _by_key(points: list[Point]) -> dict[tuple[str, str, int], Point]:
    return {(p.scenario, p.method, p.k): p for p in points}


def missing(points: list[Point], ks: list[int]) -> list[str]:
    """(scenario/method) runs that did not reach the last k (an interrupted run)."""
    if not ks:
        return []
    have = {(p.scenario, p.method, p.k) for p in points}
    out = []
    for sc in [s.name for s in SCENARIOS]:
        for m in TRAINED:
            if (sc, m, 0) in have and (sc, m, max(ks)) not in have:
                out.append(f"{sc}/{m}")
    return out


def table(points: list[Point]) -> str:
    """One row per (scenario, method, k), k = 0 (the base model) first."""
    lines = [
        "| scenario | method | k | held-out compliance | margin (nats) | Δ margin vs base "
        "| drift KL | s / correction | context tok / call | notes-only tok / call "
        "| train proposals already compliant |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = {p.scenario: p for p in points if p.k == 0 and p.method == "none"}
    base |= {p.scenario: p for p in points if p.k == 0 and p.scenario not in base}
    order = {m: i for i, m in enumerate(METHODS)}
    for p in sorted(points, key=lambda p: (p.scenario, order.get(p.method, 99), p.k)):
        if p.k == 0 and p.method != "none":
            continue  # identical to none's k = 0 row
        b = base.get(p.scenario)
        delta = p.margin - b.margin if b is not None else None
        lines.append(
            f"| {p.scenario} | {p.method} | {p.k} | {p.compliance:.0%} | {p.margin:+.2f} "
            f"| {_fmt(delta, '+.2f')} | {_fmt(p.drift_kl, '.5f')} "
            f"| {p.seconds_per_correction:.2f} | {p.context_tokens} | {p.notes_only_tokens} "
            f"| {p.train_proposals_compliant if p.method in TRAINED and p.k else '-'} |"
        )
    return "\n".join(lines)


def summary_table(points: list[Point]) -> str:
    """Compliance per scenario and method at each k (the headline grid)."""
    ks = sorted({p.k for p in points})
    idx = _by_key(points)
    methods = [m for m in METHODS if any(p.method == m for p in points)]
    head = "| scenario | method | " + " | ".join(f"k={k}" for k in ks) + " |"
    lines = [head, "|---|---|" + "---:|" * len(ks)]
    for sc in [s.name for s in SCENARIOS if any(p.scenario == s.name for p in points)]:
        for m in methods:
            cells = []
            for k in ks:
                p = idx.get((sc, m, k))
                cells.append("" if p is None else f"{p.compliance:.0%}")
            lines.append(f"| {sc} | {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# "Reached the behaviour": 3 of the default 4 held-out situations.
ISO_COMPLIANCE = 0.75


def goals(points: list[Point]) -> dict[str, Any]:
    """The three goals of the issue, computed, not asserted."""
    out: dict[str, Any] = {}
    # 1. ≥ 80 % held-out compliance after ≤ 5 corrections, weights only (no rule in context).
    hits = sorted(
        {(p.scenario, p.method, p.k) for p in points
         if p.method in TRAINED and 1 <= p.k <= 5 and p.compliance >= 0.8}
    )  # fmt: skip
    best = max(
        (p for p in points if p.method in TRAINED and 1 <= p.k <= 5),
        key=lambda p: p.compliance,
        default=None,
    )
    out["compliance_80_by_5"] = {
        "met": bool(hits),
        "hits": [f"{s}/{m}@k={k}" for s, m, k in hits],
        "best": None
        if best is None
        else f"{best.scenario}/{best.method}@k={best.k}: {best.compliance:.0%}",
    }
    # 2. SDPO drift ≤ ½ SFT drift at equal compliance: pairs (scenario, k) where the SDPO
    #    method is at least as compliant as SFT, so lower drift is not bought by learning less.
    idx = _by_key(points)
    ratios: dict[str, list[float]] = defaultdict(list)
    pairs: dict[str, int] = defaultdict(int)
    by_scenario: dict[tuple[str, str], list[float]] = defaultdict(list)
    for p in points:
        if p.method not in ("sdpo_token", "sdpo_topk") or p.k == 0 or p.drift_kl is None:
            continue
        sft = idx.get((p.scenario, "sft", p.k))
        if sft is None or sft.drift_kl is None or sft.drift_kl <= 0:
            continue
        pairs[p.method] += 1
        if p.compliance >= sft.compliance:
            ratios[p.method].append(p.drift_kl / sft.drift_kl)
            by_scenario[(p.method, p.scenario)].append(p.drift_kl / sft.drift_kl)
    out["drift_half_of_sft"] = {
        m: {
            "pairs_at_equal_or_better_compliance": len(r),
            "pairs_total": pairs[m],
            "median_drift_ratio": statistics.median(r) if r else None,
            "met": bool(r) and statistics.median(r) <= 0.5,
            "median_by_scenario": {
                sc: round(statistics.median(v), 2) for (mm, sc), v in by_scenario.items() if mm == m
            },
        }
        for m, r in ((m, ratios.get(m, [])) for m in ("sdpo_token", "sdpo_topk"))
    }
    # 2b. The same goal read at iso-compliance: the drift each method carries when it
    #     first reaches ISO_COMPLIANCE held-out compliance. Same-k pairs (above) count the
    #     k where both are still at 0 %, where drift buys nothing; this asks what reaching
    #     the behaviour cost.
    first: dict[tuple[str, str], Point] = {}
    for p in sorted(points, key=lambda p: p.k):
        if p.method in TRAINED and p.k > 0 and p.compliance >= ISO_COMPLIANCE:
            first.setdefault((p.scenario, p.method), p)
    scenarios = sorted({p.scenario for p in points})
    out["drift_to_reach"] = {}
    for m in ("sdpo_token", "sdpo_topk"):
        per: dict[str, str] = {}
        iso: list[float] = []
        for sc in scenarios:
            mine, sft = first.get((sc, m)), first.get((sc, "sft"))
            if mine is None and sft is None:
                per[sc] = "neither reaches it"
            elif mine is None and sft is not None:
                per[sc] = f"only SFT reaches it (k={sft.k})"
            elif mine is None or sft is None or sft.drift_kl is None or mine.drift_kl is None:
                per[sc] = f"only {m} reaches it (k={mine.k})"
            else:
                iso.append(mine.drift_kl / sft.drift_kl)
                per[sc] = f"{iso[-1]:.2f} (k={mine.k} vs SFT k={sft.k})"
        out["drift_to_reach"][m] = {
            "median_ratio": statistics.median(iso) if iso else None,
            "comparable_scenarios": len(iso),
            "met": bool(iso) and statistics.median(iso) <= 0.5,
            "by_scenario": per,
        }
    # 3. Context tokens ≤ 40 % of notes-only, per call; the weight methods carry 0.
    tax: dict[int, float] = {}
    for p in points:
        if p.method == "context" and p.k > 0 and p.notes_only_tokens:
            tax[p.k] = max(tax.get(p.k, 0.0), p.context_tokens / p.notes_only_tokens)
    out["context_tax"] = {
        "context_only_ratio_by_k": {k: round(v, 3) for k, v in sorted(tax.items())},
        "weights_methods_ratio": 0.0,
    }
    return out


def plots(points: list[Point], out_dir: Path) -> list[Path]:
    """evidence-{compliance,margin,drift,tradeoff}.png under `out_dir`."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on the build machines
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    scenarios = [s.name for s in SCENARIOS if any(p.scenario == s.name for p in points)]
    methods = [m for m in METHODS if any(p.method == m for p in points)]
    written = []
    for metric, ylabel, fname in (
        ("compliance", "held-out compliance", "evidence-compliance.png"),
        ("margin", "log p(compliant) − log p(violating), nats", "evidence-margin.png"),
        ("drift_kl", "drift: KL(adapter ‖ base) per token", "evidence-drift.png"),
    ):
        fig, axes = plt.subplots(
            1, len(scenarios), figsize=(4.2 * len(scenarios), 3.6), squeeze=False
        )
        for ax, sc in zip(axes[0], scenarios, strict=True):
            for m in methods:
                pts = sorted((p for p in points if p.scenario == sc and p.method == m),
                             key=lambda p: p.k)  # fmt: skip
                xs = [p.k for p in pts if getattr(p, metric) is not None]
                ys = [getattr(p, metric) for p in pts if getattr(p, metric) is not None]
                if metric == "compliance":
                    # Methods often tie (0 % or 100 %): nudge each so no line hides another.
                    nudge = (methods.index(m) - (len(methods) - 1) / 2) * 0.015
                    ys = [y + nudge for y in ys]
                if xs:
                    ax.plot(xs, ys, marker="o", ms=4, label=m, color=COLORS.get(m), alpha=0.85)
            ax.set_title(sc)
            ax.set_xlabel("corrections k")
            if metric == "compliance":
                ax.set_ylim(-0.05, 1.05)
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(ylabel)
        axes[0][-1].legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / fname
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    # Trade-off: each trained point's compliance against its drift (lower right is best).
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for m in methods:
        pts = [p for p in points if p.method == m and p.k > 0 and p.drift_kl is not None]
        if m in TRAINED and pts:
            ax.scatter([p.drift_kl for p in pts], [p.compliance for p in pts], label=m,
                       color=COLORS.get(m), alpha=0.6, s=[12 + 6 * p.k for p in pts])  # fmt: skip
    ax.set_xlabel("drift: KL(adapter ‖ base) per token")
    ax.set_ylabel("held-out compliance")
    ax.set_title("compliance vs drift (all scenarios; size = k)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / "evidence-tradeoff.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    written.append(path)
    return written
