"""Run the correction-learning suite and write the evidence (table + plots).

    python bench/learning/run.py                       # embedded SmolLM2-135M, all defaults
    python bench/learning/run.py --model /path/to/hf-model-dir
    python bench/learning/run.py --backend tinker --model Qwen/Qwen3-8B
    python bench/learning/run.py --ks 1,2,3 --scenarios scope --methods sdpo_token,sft
    python bench/learning/run.py --report-only         # re-render from the last JSON

Flags: `--ks` (checkpoints, comma-separated; default 1,2,3,5,8; at most 8, the training
situations per scenario), `--methods` (sdpo_token, sdpo_topk, sft, context, none),
`--scenarios` (names: tool_choice, package_manager, logging, scope; or scenario files,
`--scenarios my-rule.json`, see `continual_lsp.agent.scenarios`), `--held-out` (situations per
scenario, default 4), `--lr` (default: the agent's `learning_rate`), `--seed`,
`--json` (raw points), `--evidence` (the markdown page whose results block is replaced),
`--img-dir` (plots), `--device`.

Writes the raw points after every measurement, so an interrupted run keeps what it
measured; the evidence page and plots are written at the end (or with --report-only).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.learning import report  # noqa: E402
from bench.learning.scenarios import SCENARIOS, check_disjoint  # noqa: E402
from bench.learning.suite import (  # noqa: E402
    DEFAULT_KS,
    METHODS,
    Bench,
    Point,
    SuiteConfig,
    load_points,
    run_suite,
    save_points,
)

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default=None, help="model dir / .gguf / tinker base model")
    ap.add_argument("--backend", choices=["local", "tinker"], default="local")
    ap.add_argument("--device", default=None)
    ap.add_argument("--ks", default=",".join(map(str, DEFAULT_KS)))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument(
        "--scenarios",
        nargs="+",
        default=[",".join(s.name for s in SCENARIOS)],
        help="scenario names (comma-separated) and/or scenario files (.json / .toml)",
    )
    ap.add_argument("--held-out", type=int, default=4)
    # Default: the agent's own `learning_rate`, so the table measures the product as shipped.
    ap.add_argument("--lr", type=float, default=0.0, help="0 = the agent's learning_rate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kl-coef", type=float, default=None, help="default: the agent's kl_coef")
    ap.add_argument("--json", type=Path, default=REPO / "bench/learning/results/last-run.json")
    ap.add_argument("--evidence", type=Path, default=REPO / "docs/evidence.md")
    ap.add_argument("--img-dir", type=Path, default=REPO / "docs/img")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument(
        "--merge",
        type=Path,
        action="append",
        default=[],
        help="with --report-only: also take the points of these JSON files (a run split\n"
        "over processes by --scenarios); wall times add up (serial equivalent)",
    )
    return ap.parse_args(argv)


def results_block(meta: dict[str, object], points: list[Point], images: list[Path]) -> str:
    g = report.goals(points)
    header = (
        f"Run: {meta.get('started')} · model `{meta.get('model')}` · backend "
        f"`{meta.get('backend')}` · lr {meta.get('lr')} · kl_coef {meta.get('kl_coef')} · "
        f"ks {meta.get('ks')} · {meta.get('held_out')} held-out situations per scenario · "
        f"seed {meta.get('seed')} · {meta.get('threads')} torch thread(s) · "
        f"wall time {meta.get('wall_s', '?')} s"
    )
    if meta.get("parts"):
        header += f" (sum of {meta['parts']} processes run side by side: serial-equivalent)"
    if meta.get("incomplete"):
        header += f" (INCOMPLETE: {meta['incomplete']})"
    lines = [
        BEGIN,
        "",
        header + ".",
        "",
        "### Held-out compliance (greedy proposal, rule not in context except `context`)",
        "",
        report.summary_table(points),
        "",
        "### Goals (computed from the points below)",
        "",
        f"- ≥ 80 % held-out compliance after ≤ 5 corrections (weights only): "
        f"**{'met' if g['compliance_80_by_5']['met'] else 'not met'}**; "
        f"best {g['compliance_80_by_5']['best']}"
        + (
            f"; hits {', '.join(g['compliance_80_by_5']['hits'])}"
            if g["compliance_80_by_5"]["hits"]
            else ""
        ),
    ]
    for m, d in g["drift_half_of_sft"].items():
        ratio = d["median_drift_ratio"]
        lines.append(
            f"- {m} drift ≤ ½ SFT drift at equal-or-better compliance: "
            f"**{'met' if d['met'] else 'not met'}** (median ratio "
            f"{'n/a' if ratio is None else f'{ratio:.2f}'} over "
            f"{d['pairs_at_equal_or_better_compliance']} of {d['pairs_total']} (scenario, k) pairs; "
            "per scenario: "
            + (", ".join(f"{sc} {v:.2f}" for sc, v in d["median_by_scenario"].items()) or "none")
            + ")"
        )
    for m, d in g["drift_to_reach"].items():
        ratio = d["median_ratio"]
        lines.append(
            f"- {m} drift ≤ ½ SFT drift at iso-compliance (drift when each method first reaches "
            f"≥ {report.ISO_COMPLIANCE:.0%} held-out compliance): "
            f"**{'met' if d['met'] else 'not met'}** (median ratio "
            f"{'n/a' if ratio is None else f'{ratio:.2f}'} over {d['comparable_scenarios']} "
            "scenario(s) both reach; "
            + ", ".join(f"{sc} {v}" for sc, v in d["by_scenario"].items())
            + ")"
        )
    tax = g["context_tax"]["context_only_ratio_by_k"]
    lines.append(
        "- context tokens ≤ 40 % of notes-only: weight methods carry 0 tokens (0 %); "
        "context-only carries one bullet: " + ", ".join(f"k={k}: {v:.0%}" for k, v in tax.items())
    )
    lines += ["", "### All points", "", report.table(points), ""]
    for img in images:
        rel = os.path.relpath(img, REPO / "docs")
        lines.append(f"![{img.stem}]({rel})")
    lines += ["", END]
    return "\n".join(lines)


def write_evidence(path: Path, block: str) -> None:
    """Replace the results block of the evidence page, keeping the prose around it."""
    text = path.read_text() if path.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + block + tail
    else:
        text = (
            (text.rstrip() + "\n\n" if text else "# Evidence\n\n") + "## Results\n\n" + block + "\n"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    log = logging.getLogger("bench.learning")
    if args.report_only:
        meta, points = load_points(args.json)
        for extra in args.merge:
            extra_meta, extra_points = load_points(extra)
            # A notes-only agent carries the corrections of *every* scenario; a part run
            # counted only its own, so take the per-k figure from the main run.
            notes = {p.k: p.notes_only_tokens for p in points if p.method == "none"}
            for p in extra_points:
                p.notes_only_tokens = notes.get(p.k, p.notes_only_tokens)
            # The part's scenarios replace whatever the main run had begun of them.
            taken = {p.scenario for p in extra_points}
            points = [p for p in points if p.scenario not in taken] + extra_points
            meta["wall_s"] = int(meta.get("wall_s", 0)) + int(extra_meta.get("wall_s", 0))
            meta["parts"] = int(meta.get("parts", 1)) + 1
            if extra_meta.get("incomplete"):
                meta["incomplete"] = f"part {extra} {extra_meta['incomplete']}"
        missing = report.missing(points, [int(k) for k in meta.get("ks", [])])
        if missing:
            meta["incomplete"] = "missing " + ", ".join(missing)
        else:
            meta.pop("incomplete", None)
    else:
        problems = check_disjoint()
        if problems:
            raise SystemExit("held-out situations leak from training:\n" + "\n".join(problems))
        import torch

        from continual_lsp.config import Settings

        overrides = {"backend": args.backend, "model": args.model, "device": args.device}
        if args.kl_coef is not None:
            overrides["kl_coef"] = args.kl_coef
        settings = Settings.load(**overrides)
        config = SuiteConfig(
            ks=[int(k) for k in _csv(args.ks)],
            methods=_csv(args.methods),
            scenarios=[name for entry in args.scenarios for name in _csv(entry)],
            held_out=args.held_out,
            lr=args.lr or None,
            seed=args.seed,
        )
        unknown = set(config.methods) - set(METHODS)
        if unknown:
            raise SystemExit(f"unknown methods {sorted(unknown)}")
        torch.manual_seed(args.seed)
        start = time.perf_counter()
        if settings.backend == "local":
            from continual_lsp.policy.local.local_policy import LocalPolicy

            # One base model for the whole run; the adapter is reset, never reloaded.
            policy = LocalPolicy(settings)
            factory = None
        else:
            from continual_lsp.policy.factory import make_trainer

            policy = make_trainer(settings)

            def factory() -> object:
                return make_trainer(settings)

        log.info("loaded %s in %.1fs", settings.model, time.perf_counter() - start)
        meta: dict[str, object] = {
            "started": time.strftime("%Y-%m-%d %H:%M"),
            "model": settings.model,
            "backend": settings.backend,
            "lr": args.lr or settings.learning_rate,
            "kl_coef": settings.kl_coef,
            "ks": config.ks,
            "held_out": args.held_out,
            "seed": args.seed,
            "threads": torch.get_num_threads(),
            "host": f"{platform.machine()}, {os.cpu_count()} cpus",
            "incomplete": "running",
        }
        bench = Bench(settings, policy, config, policy_factory=factory)
        points: list[Point] = []

        def on_point(p: Point) -> None:
            points.append(p)
            meta["wall_s"] = round(time.perf_counter() - start)
            save_points(points, args.json, meta)

        run_suite(bench, on_point)
        meta["wall_s"] = round(time.perf_counter() - start)
        meta.pop("incomplete", None)
        save_points(points, args.json, meta)
        log.info("suite done in %ss", meta["wall_s"])
    images = report.plots(points, args.img_dir)
    write_evidence(args.evidence, results_block(meta, points, images))
    log.info("wrote %s and %d plots", args.evidence, len(images))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
