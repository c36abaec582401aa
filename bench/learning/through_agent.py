"""One scenario through the product's own loop: `Agent` + training worker + lanes.

    python bench/learning/through_agent.py                      # package_manager, k = 8
    python bench/learning/through_agent.py --scenario scope --corrections 5

`run.py` calls `sdpo_step` directly on prepared prompts. This asks whether the same
learning happens when the corrections go through what a reviewer actually drives: for
each training situation a task is started in a copy of the scenario's workspace; a
scripted reviewer denies a proposal that breaks the rule with the situation's correction
(the worker process takes the SDPO step, the lanes route it, the agent retries from the
new weights), approves a compliant one (the approved retry becomes the denied turn's
demonstration) and ignores read-only calls (auto-approved). After every situation the
held-out compliance of the agent's own policy is measured exactly as in `run.py` (same
prompts, greedy, rule not in context), against the base model measured in the same run,
and again after the lanes' guards: what the reviewer would be shown.

What differs from `run.py` on purpose: the agent's prompts (its own history, the lanes'
bullets when a cue matches), guard blocks if the allocator compiles one, and retries.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.learning.scenarios import (  # noqa: E402
    SCENARIOS,
    WORKSPACES,
    Scenario,
    judge_call,
    judge_text,
)
from bench.learning.suite import Bench, SuiteConfig  # noqa: E402

log = logging.getLogger("through_agent")


def review(
    agent: Any, scenario: Scenario, situation: Any, proposal: Any, mode: str
) -> dict[str, int]:
    """Script one task's reviewer: a call that breaks the rule is denied with the
    correction (`deny`) or replaced by the situation's demonstration with the correction
    as its comment (`edit`); a call that keeps the rule is approved."""
    counts = {"denied": 0, "edited": 0, "approved": 0, "proposals": 0}
    while proposal is not None and counts["proposals"] < 4:
        counts["proposals"] += 1
        call = {"tool": proposal.call.tool, "arguments": proposal.call.arguments}
        if scenario.check(judge_call(call)):
            agent.decide(proposal.id, "approve")
            counts["approved"] += 1
            break  # the behaviour was shown; the rest of the task is not this bench's
        if mode == "edit":
            demo = {"tool": situation.demo["tool"], **situation.demo["arguments"]}
            agent.decide(proposal.id, "edit", situation.correction, edited_arguments=demo)
            counts["edited"] += 1
            break
        outcome = agent.decide(proposal.id, "deny", correction=situation.correction)
        counts["denied"] += 1
        proposal = outcome.next_proposal
    return counts


def after_guards(agent: Any, scenario: Scenario, records: list[dict[str, Any]]) -> float:
    """Held-out compliance of what the reviewer would see: each held-out proposal after the
    lanes' guards (a CODE item rewrites or blocks it before it is shown). A block counts
    as compliant: the violating call never reaches the reviewer."""
    from pydantic import ValidationError

    from continual_lsp.tools.base import ToolCall

    ok = 0
    for record in records:
        judged = judge_text(record["text"], agent.policy.renderer.parse_call)
        try:
            call = ToolCall(tool=str(judged.tool), arguments=judged.arguments)
            verdict = agent.lanes.check_guards(call, None)
        except (ValidationError, ValueError):
            ok += bool(scenario.check(judged))  # a call cut at the budget: as judged
            continue
        if verdict.action == "block":
            ok += 1
        elif verdict.action == "rewrite" and verdict.rewritten_call is not None:
            shown = verdict.rewritten_call
            ok += bool(
                scenario.check(judge_call({"tool": shown.tool, "arguments": shown.arguments}))
            )
        else:
            ok += bool(scenario.check(judged))
    return ok / max(1, len(records))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="package_manager", choices=[s.name for s in SCENARIOS])
    ap.add_argument("--corrections", type=int, default=8, help="training situations (≤ 8)")
    ap.add_argument("--held-out", type=int, default=4)
    ap.add_argument(
        "--reviewer", choices=["deny", "edit"], default="deny",
        help="deny: the correction text only; edit: the demonstration too (as run.py gives)",
    )  # fmt: skip
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.json is None:
        args.json = (
            REPO / f"bench/learning/results/through-agent-{args.scenario}-{args.reviewer}.json"
        )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")

    from continual_lsp.agent.session import Agent
    from continual_lsp.config import Settings

    scenario = next(s for s in SCENARIOS if s.name == args.scenario)
    work = Path(tempfile.mkdtemp(prefix="through-agent-"))
    settings = Settings(
        store_path=str(work / "store.sqlite3"),
        adapters_dir=str(work / "adapters"),
        # The scenario's decision only, as run.py's grammar does: with read and glob open
        # the 135M model mostly re-reads files until the agent ends the task (measured:
        # 2 of 3 tasks never reached a bash proposal).
        allowed_tools=list(scenario.tools),
        max_turns=6,
    )
    config = SuiteConfig(held_out=args.held_out)
    rows: list[dict[str, Any]] = []
    # Every scenario's situations share one sample workspace: one agent, one store, one
    # adapter lineage for the whole run.
    ws = work / "ws"
    shutil.copytree(WORKSPACES / scenario.train[0].workspace, ws)
    agent = Agent(settings, ws)
    start = time.perf_counter()
    try:
        base = Bench(settings, agent.policy, config)
        c, m, _ = base.evaluate(scenario)
        rows.append({"k": 0, "compliance": c, "shown": c, "margin": m, "drift": 0.0})
        log.info("base: compliance %.2f margin %+.2f", c, m)
        for i, situation in enumerate(scenario.train[: args.corrections]):
            t0 = time.perf_counter()
            task_id, first = agent.start_task(situation.task)
            counts = review(agent, scenario, situation, first, args.reviewer)
            ended = [
                e["payload"]["summary"]
                for e in agent.store.events(kind="task_status")
                if e["task_id"] == task_id
            ]
            calls = [
                f"{e['payload']['tool']}:{e['payload']['status']}"
                for e in agent.store.events(kind="proposal")
                if e["task_id"] == task_id
            ]
            agent.training.sync_sampler(agent.policy)
            bench = Bench(settings, agent.policy, config)
            c, m, records = bench.evaluate(scenario)
            shown = after_guards(agent, scenario, records)
            drift = bench.drift()
            status = agent.status()
            rows.append(
                {
                    "k": i + 1,
                    "compliance": c,
                    "shown": shown,
                    "margin": m,
                    "drift": drift,
                    "seconds": round(time.perf_counter() - t0, 1),
                    "adapter": status.adapter_version,
                    "training_steps": status.training_steps,
                    "calls": calls,
                    "ended": ended[0] if ended else None,
                    **counts,
                }
            )
            log.info(
                "k=%d %s: compliance %.2f margin %+.2f drift %.5f (%s; %s; %s)",
                i + 1, situation.id, c, m, drift or 0.0, counts, calls, rows[-1]["ended"],
            )  # fmt: skip
        lanes = [{"lane": item.lane, "text": item.text[:80]} for item in agent.ledger().items]
    finally:
        agent.close()
    wall = round(time.perf_counter() - start)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "scenario": scenario.name,
                "reviewer": args.reviewer,
                "wall_s": wall,
                "rows": rows,
                "lanes": lanes,
            },
            indent=1,
        )
    )
    base_c, base_m = rows[0]["compliance"], rows[0]["margin"]
    print(
        f"\n{scenario.name} through the agent, reviewer {args.reviewer} ({wall} s; "
        "baseline = the base model, same run)"
    )
    print(
        "| k | held-out compliance (weights) | Δ vs base | after guards | margin | Δ margin "
        "| drift | denied | edited | approved |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['k']} | {r['compliance']:.0%} | {r['compliance'] - base_c:+.0%} "
            f"| {r['shown']:.0%} "
            f"| {r['margin']:+.2f} | {r['margin'] - base_m:+.2f} | {r['drift'] or 0:.5f} "
            f"| {r.get('denied', '-')} | {r.get('edited', '-')} | {r.get('approved', '-')} |"
        )
    print("lanes: " + "; ".join(f"{x['lane']}: {x['text']}" for x in lanes))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
