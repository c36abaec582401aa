"""One scenario through the product's own loop: `Agent` + training worker + lanes.

    python bench/learning/through_agent.py                      # package_manager, k = 8
    python bench/learning/through_agent.py --scenarios scope --corrections 5
    python bench/learning/through_agent.py --scenarios all --reviewer deny \\
        --evidence bench/results/through_agent_deny.json

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
Each task starts with the files its situation's history read in view (as a reviewer who
starts it from that file's editor); the glob of package_manager's history is not replayed.
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
    select,
)
from bench.learning.suite import Bench, SuiteConfig  # noqa: E402

log = logging.getLogger("through_agent")


def review(
    agent: Any, scenario: Scenario, situation: Any, proposal: Any, mode: str
) -> dict[str, Any]:
    """Script one task's reviewer: a call that breaks the rule is denied with the
    correction (`deny`) or replaced by the situation's demonstration with the correction
    as its comment (`edit`); a call that keeps the rule is approved, and so is a call
    with a tool the rule is not about (it runs; the task goes on). For every denial:
    whether the proposal right after it follows the correction, and how long the reviewer
    waited for it (deny → retry shown; the step lands after it)."""
    counts: dict[str, Any] = {
        "denied": 0, "edited": 0, "approved": 0, "proposals": 0, "outside_rule": 0,
    }  # fmt: skip
    follows: list[bool] = []
    waits: list[float] = []
    while proposal is not None and counts["proposals"] < 6:
        counts["proposals"] += 1
        call = {"tool": proposal.call.tool, "arguments": proposal.call.arguments}
        if proposal.call.tool not in scenario.tools:
            # The rule is silent on this call (running the tests under a file-tool rule):
            # the reviewer lets it run and waits for the call the rule is about.
            counts["outside_rule"] += 1
            proposal = agent.decide(proposal.id, "approve").next_proposal
            continue
        if scenario.check(judge_call(call)):
            agent.decide(proposal.id, "approve")
            counts["approved"] += 1
            break  # the behaviour was shown; the rest of the task is not this bench's
        if mode == "edit":
            demo = {"tool": situation.demo["tool"], **situation.demo["arguments"]}
            agent.decide(proposal.id, "edit", situation.correction, edited_arguments=demo)
            counts["edited"] += 1
            break
        t0 = time.perf_counter()
        outcome = agent.decide(proposal.id, "deny", correction=situation.correction)
        waits.append(time.perf_counter() - t0)
        counts["denied"] += 1
        proposal = outcome.next_proposal
        nxt = proposal.call if proposal is not None else None
        follows.append(
            nxt is not None
            and bool(scenario.check(judge_call({"tool": nxt.tool, "arguments": nxt.arguments})))
        )
    counts["follows"] = follows
    counts["deny_s"] = [round(w, 2) for w in waits]
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


def run_scenario(scenario: Scenario, args: argparse.Namespace) -> dict[str, Any]:
    """One scenario through a fresh agent (its own store, adapters and worker)."""
    from continual_lsp.agent.agent import Agent
    from continual_lsp.config import Settings

    work = Path(tempfile.mkdtemp(prefix="through-agent-"))
    settings = Settings(
        store_path=str(work / "store.sqlite3"),
        adapters_dir=str(work / "adapters"),
        # All seven tools, as a user runs it: the starter was trained with all seven in
        # its prompt, and narrowed to the scenario's tools it writes whole files instead
        # (measured on tool_choice: `write` for every retry, `edit` once all were open).
        max_turns=6,
        starter=not args.no_starter,
    )
    config = SuiteConfig(held_out=args.held_out)
    rows: list[dict[str, Any]] = []
    # Every scenario's situations share one sample workspace: one agent, one store, one
    # adapter lineage for the whole scenario.
    ws = work / "ws"
    shutil.copytree(WORKSPACES / scenario.train[0].workspace, ws)
    agent = Agent(settings, ws)
    start = time.perf_counter()
    try:
        # Building the policy starts the training worker too (as the server does when a
        # client connects): the base evaluation is the reviewer reading the first proposal.
        base = Bench(settings, agent.policy, config)
        c, m, _ = base.evaluate(scenario)
        rows.append({"k": 0, "compliance": c, "shown": c, "margin": m, "drift": 0.0})
        log.info("%s base: compliance %.2f margin %+.2f", scenario.name, c, m)
        for i, situation in enumerate(scenario.train[: args.corrections]):
            t0 = time.perf_counter()
            # The files the situation's history read are in view, as when a reviewer
            # starts the task from the file's editor (`continual/startTask` files).
            in_view = [a["path"] for tool, a, _ in situation.history if tool == "read"]
            task_id, first = agent.start_task(situation.task, in_view)
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
            # The held-out proposals are the student's next turns: like the agent's own,
            # they wait for the denials' steps still running.
            agent.await_steps()
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
                "k=%d %s: compliance %.2f shown %.2f margin %+.2f drift %.5f (%s; %s; %s)",
                i + 1, situation.id, c, shown, m, drift or 0.0, counts, calls, rows[-1]["ended"],
            )  # fmt: skip
        lanes = [{"lane": item.lane, "text": item.text[:80]} for item in agent.ledger().items]
        chosen = [e["payload"] for e in agent.store.events(kind="retry_chosen")]
    finally:
        agent.close()
    shutil.rmtree(work, ignore_errors=True)
    return {
        "scenario": scenario.name,
        "reviewer": args.reviewer,
        "wall_s": round(time.perf_counter() - start),
        "rows": rows,
        "lanes": lanes,
        "retries": chosen,
    }


def _at(rows: list[dict[str, Any]], k: int, key: str) -> float | None:
    """`key` at the k-th correction; None when the run stopped before it."""
    row = next((r for r in rows if r["k"] == k), None)
    return None if row is None else float(row[key])


def headline(result: dict[str, Any]) -> dict[str, float | None]:
    """The issue's three numbers for one scenario."""
    rows = result["rows"]
    follows = [f for r in rows for f in r.get("follows", [])]
    return {
        "retry_follows": round(sum(follows) / len(follows), 3) if follows else None,
        "shown_at_3": _at(rows, 3, "shown"),
        "weights_at_5": _at(rows, 5, "compliance"),
    }


def print_table(result: dict[str, Any]) -> None:
    rows = result["rows"]
    base_c, base_m = rows[0]["compliance"], rows[0]["margin"]
    print(
        f"\n{result['scenario']} through the agent, reviewer {result['reviewer']} "
        f"({result['wall_s']} s; baseline = the base model, same run)"
    )
    print(
        "| k | held-out compliance (weights) | Δ vs base | after guards | margin | Δ margin "
        "| drift | denied | retry follows | edited | approved |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        follows = r.get("follows")
        print(
            f"| {r['k']} | {r['compliance']:.0%} | {r['compliance'] - base_c:+.0%} "
            f"| {r['shown']:.0%} "
            f"| {r['margin']:+.2f} | {r['margin'] - base_m:+.2f} | {r['drift'] or 0:.5f} "
            f"| {r.get('denied', '-')} | {sum(follows) if follows is not None else '-'} "
            f"| {r.get('edited', '-')} | {r.get('approved', '-')} |"
        )
    print("lanes: " + "; ".join(f"{x['lane']}: {x['text']}" for x in result["lanes"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--scenarios", "--scenario", nargs="+", default=["package_manager"],
        help="scenario names or files (.json / .toml), or all (the four bundled ones)",
    )  # fmt: skip
    ap.add_argument("--corrections", type=int, default=8, help="training situations (≤ 8)")
    ap.add_argument("--held-out", type=int, default=4)
    ap.add_argument(
        "--reviewer", choices=["deny", "edit"], default="deny",
        help="deny: the correction text only; edit: the demonstration too (as run.py gives)",
    )  # fmt: skip
    ap.add_argument(
        "--evidence", type=Path, default=None,
        help="write the headline numbers here (deny: bench/results/through_agent_deny.json)",
    )  # fmt: skip
    ap.add_argument(
        "--no-starter", action="store_true",
        help="the bare base model; --evidence gets a without_starter column beside scenarios",
    )  # fmt: skip
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    chosen = SCENARIOS if "all" in args.scenarios else select(args.scenarios)
    headlines: dict[str, dict[str, float | None]] = {}
    for scenario in chosen:
        name = scenario.name
        result = run_scenario(scenario, args)
        suffix = "-base" if args.no_starter else ""
        out = REPO / f"bench/learning/results/through-agent-{name}-{args.reviewer}{suffix}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
        print_table(result)
        headlines[name] = headline(result)
        print(f"{name}: {headlines[name]}", flush=True)
        if args.evidence is not None:  # after every scenario: a long run keeps what it did
            args.evidence.parent.mkdir(parents=True, exist_ok=True)
            before = json.loads(args.evidence.read_text()) if args.evidence.exists() else {}
            key = "without_starter" if args.no_starter else "scenarios"
            evidence = {**before, key: headlines}
            args.evidence.write_text(json.dumps(evidence, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
