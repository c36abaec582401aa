"""One scenario through the product's own loop: `Agent` + training worker + lanes.

    python bench/learning/through_agent.py                      # package_manager, k = 8
    python bench/learning/through_agent.py --scenarios scope --corrections 5
    python bench/learning/through_agent.py --scenarios all --reviewer deny \\
        --evidence bench/results/through_agent_deny.json
    python bench/learning/through_agent.py --baseline --scenarios command_prefix test_naming
    python bench/learning/through_agent.py --forgetting logging scope --corrections 5 \\
        --skill-tasks 36 --evidence bench/results/through_agent_deny.json

`--baseline`: k = 0 only (base + starter, no correction), exit 1 when a scenario's
held-out compliance is above 0. `--forgetting FIRST SECOND`: lessons on FIRST, eight of
SECOND on the same adapter lineage, FIRST's held-out compliance again (`kept_fraction`)
and, with `--skill-tasks`, agent_skill's one-step score with and without that adapter
(`agent_skill_drop`, points). `--adapter DIR`: a candidate starter instead of the shipped
one; `--summary FILE`: the headline numbers for scripts/check_starter_learns.sh; `--set
KEY=VALUE`: a Settings field for the agent (a learning option under test).

`run.py` calls `sdpo_step` directly on prepared prompts. This asks whether the same
learning happens when the corrections go through what a reviewer actually drives: for
each training situation a task is started in a copy of the scenario's workspace; a
scripted reviewer denies a proposal that breaks the rule with the situation's correction
(the worker process takes the SDPO step, the lanes route it, the agent retries from the
new weights), approves a compliant one (the approved retry becomes the denied turn's
demonstration), ignores read-only calls (auto-approved) and approves the calls the rule
is not about (the scenario's `about`: under a commit-message rule, running the tests).
After every situation the
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
    DEV_SCENARIOS,
    SCENARIOS,
    WORKSPACES,
    Scenario,
    judge_call,
    judge_text,
    select,
)
from bench.learning.suite import Bench, SuiteConfig  # noqa: E402
from continual_lsp.policy.model_files import cpu_model  # noqa: E402

log = logging.getLogger("through_agent")

# Acceptance (issue 33): after eight lessons of a second rule, the first is measured again.
SECOND_LESSONS = 8


def review(
    agent: Any, scenario: Scenario, situation: Any, proposal: Any, mode: str
) -> dict[str, Any]:
    """Script one task's reviewer: a call that breaks the rule is denied with the
    correction (`deny`) or replaced by the situation's demonstration with the correction
    as its comment (`edit`); a call that keeps the rule is approved, and so is a call
    the rule is not about (`Scenario.about`: it runs; the task goes on) — overridden
    instead when a guard blocks it — unless it leaves the task (`Scenario.off_task`: an
    edit to the code when the task is to commit it, a `done` before the tests are
    written), which is denied with the correction in both modes. For every denial:
    whether the proposal right after it follows the correction, and how long the reviewer
    waited for it (deny → retry shown; the step lands after it)."""
    counts: dict[str, Any] = {
        "denied": 0, "edited": 0, "approved": 0, "proposals": 0, "outside_rule": 0,
        "off_task": 0,
    }  # fmt: skip
    follows: list[bool] = []
    waits: list[float] = []
    while proposal is not None and counts["proposals"] < 6:
        counts["proposals"] += 1
        call = {"tool": proposal.call.tool, "arguments": proposal.call.arguments}
        judged = judge_call(call)
        if not scenario.about(judged) and scenario.off_task(judged):
            # What a reviewer who wants the task done says to a call that leaves it:
            # without this the agent edited the code it was asked to commit, and the rule
            # was never reached (test_naming, commit_message: not one denial in four runs
            # of five tasks each).
            counts["off_task"] += 1
        elif not scenario.about(judged):
            # The rule is silent on this call (running the tests under a file-tool rule,
            # or under a commit-message rule): the reviewer lets it run and waits for
            # the call the rule is about.
            counts["outside_rule"] += 1
            proposal = agent.decide(proposal.id, accept(proposal)).next_proposal
            continue
        elif scenario.check(judged):
            agent.decide(proposal.id, accept(proposal))
            counts["approved"] += 1
            break  # the behaviour was shown; the rest of the task is not this bench's
        elif mode == "edit":
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


def accept(proposal: Any) -> str:
    """How the reviewer lets a call run: approve, or override when a guard blocks a call
    the reviewer wants (a blocked proposal offers no approve; issue 31)."""
    return "override" if proposal.blocked_by else "approve"


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


def _settings(work: Path, args: argparse.Namespace) -> Any:
    from continual_lsp.config import Settings

    return Settings(
        store_path=str(work / "store.sqlite3"),
        adapters_dir=str(work / "adapters"),
        # All seven tools, as a user runs it: the starter was trained with all seven in
        # its prompt, and narrowed to the scenario's tools it writes whole files instead
        # (measured on tool_choice: `write` for every retry, `edit` once all were open).
        max_turns=6,
        starter=not args.no_starter,
        **dict(getattr(args, "settings", None) or {}),
    )


def _agent(settings: Any, work: Path, scenario: Scenario) -> Any:
    """An agent on a fresh copy of the scenario's workspace; agents made one after another
    with the same settings share the store and so the adapter lineage."""
    from continual_lsp.agent.agent import Agent

    ws = work / f"ws-{scenario.name}"
    shutil.rmtree(ws, ignore_errors=True)
    shutil.copytree(WORKSPACES / scenario.train[0].workspace, ws)
    return Agent(settings, ws)


def measure(
    agent: Any, settings: Any, config: SuiteConfig, scenario: Scenario
) -> tuple[float, float, float, float | None]:
    """(weights-only compliance, after guards, margin, drift) on the held-out situations,
    once the steps still running have landed: the student's next turns wait for them too."""
    agent.await_steps()
    agent.training.sync_sampler(agent.policy)
    bench = Bench(settings, agent.policy, config)
    c, m, records = bench.evaluate(scenario)
    return c, after_guards(agent, scenario, records), m, bench.drift()


def teach(
    agent: Any,
    settings: Any,
    config: SuiteConfig,
    scenario: Scenario,
    count: int,
    args: argparse.Namespace,
) -> list[dict[str, Any]]:
    """The first `count` training situations of `scenario` through the scripted reviewer,
    one row per situation with the held-out numbers measured right after it."""
    rows: list[dict[str, Any]] = []
    for i, situation in enumerate(scenario.train[:count]):
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
        c, shown, m, drift = measure(agent, settings, config, scenario)
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
    return rows


def run_scenario(scenario: Scenario, args: argparse.Namespace) -> dict[str, Any]:
    """One scenario through a fresh agent (its own store, adapters and worker)."""
    work = Path(tempfile.mkdtemp(prefix="through-agent-"))
    settings = _settings(work, args)
    config = SuiteConfig(held_out=args.held_out)
    # Every scenario's situations share one sample workspace: one agent, one store, one
    # adapter lineage for the whole scenario.
    agent = _agent(settings, work, scenario)
    start = time.perf_counter()
    try:
        # Building the policy starts the training worker too (as the server does when a
        # client connects): the base evaluation is the reviewer reading the first proposal.
        base = Bench(settings, agent.policy, config)
        c, m, _ = base.evaluate(scenario)
        rows = [{"k": 0, "compliance": c, "shown": c, "margin": m, "drift": 0.0}]
        log.info("%s base: compliance %.2f margin %+.2f", scenario.name, c, m)
        rows += teach(agent, settings, config, scenario, args.corrections, args)
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


def baseline(scenarios: list[Scenario], args: argparse.Namespace) -> dict[str, float]:
    """k = 0: each scenario's held-out compliance on base + starter with no correction
    (greedy, rule not in context), the number every scenario must start from (0: a rule the
    model already follows teaches nothing). One policy, no agent and no training worker."""
    from continual_lsp.config import Settings
    from continual_lsp.policy.local.local_policy import LocalPolicy

    settings = Settings(starter=not args.no_starter, enable_training=False)
    policy = LocalPolicy(settings)
    bench = Bench(settings, policy, SuiteConfig(held_out=args.held_out))
    out = {}
    for scenario in scenarios:
        c, m, records = bench.evaluate(scenario)
        out[scenario.name] = c
        for r in records:
            print(f"{'ok  ' if r['complied'] else 'FAIL'} {r['situation']}: {r['text'][:90]!r}")
        print(f"{scenario.name}: k = 0 held-out compliance {c:.0%}, margin {m:+.2f}", flush=True)
    return out


def forgetting_numbers(
    before: float, after: float, skill_before: float | None, skill_after: float | None
) -> dict[str, float | None]:
    """`kept_fraction`: the first rule's held-out compliance after the second rule's
    lessons over what it had before them (None when it had nothing to keep; capped at 1: a
    rule that got better kept all of it). `agent_skill_drop`: one-step tasks finished
    without the lessons minus with them, in points (None when not measured)."""
    kept = None if before <= 0 else round(min(1.0, after / before), 3)
    drop = (
        None
        if skill_before is None or skill_after is None
        else round(100 * (skill_before - skill_after), 1)
    )
    return {"kept_fraction": kept, "agent_skill_drop": drop}


def one_step_finished(adapter: Path | None, tasks: int) -> float:
    """`bench/agent_skill.py`'s one-step score (share of tasks finished) on base + starter,
    with the reviewer's adapter `adapter` loaded on top (None: without one)."""
    from bench.agent_skill import load_policies, run_task, skill_tasks

    policy = load_policies(None, ["starter"])["starter"]
    if adapter is not None:
        policy.load_adapter(str(adapter))
    rows = []
    for s in skill_tasks(tasks):
        with tempfile.TemporaryDirectory(prefix="agent-skill-") as tmp:
            rows.append(run_task(policy, s, Path(tmp), 8))
    return sum(bool(r["finished"]) for r in rows) / max(1, len(rows))


def run_forgetting(first: Scenario, second: Scenario, args: argparse.Namespace) -> dict[str, Any]:
    """Lessons on `first` (`--corrections`), then SECOND_LESSONS of `second` on the same
    adapter lineage (one store; the second agent starts from the first's newest version),
    then `first`'s held-out compliance again: how much of the first lesson the second kept.
    With `--skill-tasks N`: agent_skill's one-step score with and without that adapter."""
    work = Path(tempfile.mkdtemp(prefix="forgetting-"))
    settings = _settings(work, args)
    config = SuiteConfig(held_out=args.held_out)
    start = time.perf_counter()
    agent = _agent(settings, work, first)
    try:
        rows_first = teach(agent, settings, config, first, args.corrections, args)
    finally:
        agent.close()
    before = rows_first[-1]["compliance"] if rows_first else 0.0
    agent = _agent(settings, work, second)
    try:
        rows_second = teach(agent, settings, config, second, SECOND_LESSONS, args)
        after, shown_after, margin_after, _ = measure(agent, settings, config, first)
    finally:
        agent.close()
    from continual_lsp.policy.local.adapter_files import list_adapters

    versions = list_adapters(settings.adapters_dir, with_sha256=False)
    tag = f"-{args.tag}" if args.tag else ""
    kept_dir = REPO / f"bench/learning/results/forgetting-{first.name}-{second.name}{tag}-adapter"
    shutil.rmtree(kept_dir, ignore_errors=True)
    if versions:
        shutil.copytree(versions[-1].path, kept_dir)
    shutil.rmtree(work, ignore_errors=True)
    skill_before = skill_after = None
    if args.skill_tasks and versions:
        skill_before = one_step_finished(None, args.skill_tasks)
        skill_after = one_step_finished(kept_dir, args.skill_tasks)
    return {
        "first": first.name,
        "second": second.name,
        "reviewer": args.reviewer,
        "lessons_first": len(rows_first),
        "lessons_second": len(rows_second),
        "first_before": before,
        "first_after": after,
        "first_after_shown": shown_after,
        "first_after_margin": margin_after,
        "second_after": rows_second[-1]["compliance"] if rows_second else None,
        "skill_tasks": args.skill_tasks if skill_before is not None else 0,
        "one_step_before": skill_before,
        "one_step_after": skill_after,
        **forgetting_numbers(before, after, skill_before, skill_after),
        "adapter": str(kept_dir.relative_to(REPO)) if versions else None,
        "wall_s": round(time.perf_counter() - start),
        "rows_first": rows_first,
        "rows_second": rows_second,
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


def _setting(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value


def acceptance(headlines: dict[str, dict[str, float | None]]) -> dict[str, Any]:
    """Issue 33's bars over the scenarios of one run: the weights learned (held-out
    compliance ≥ 0.5 at the 5th correction and shown ≥ 0.75 at the 3rd) in ≥ 6 of 8, the
    retry followed the correction in ≥ 0.8 of denials in ≥ 7 of 8 (scaled to the count)."""
    n = len(headlines)
    learned = sorted(
        name
        for name, h in headlines.items()
        if (h["weights_at_5"] or 0) >= 0.5 and (h["shown_at_3"] or 0) >= 0.75
    )
    follows = sorted(name for name, h in headlines.items() if (h["retry_follows"] or 0) >= 0.8)
    learned_bar, follows_bar = -(-6 * n // 8), -(-7 * n // 8)
    return {
        "scenarios": n,
        "learned": learned,
        "learned_bar": learned_bar,
        "follows": follows,
        "follows_bar": follows_bar,
        "met": len(learned) >= learned_bar and len(follows) >= follows_bar,
    }


def _merge_evidence(path: Path, key: str, value: dict[str, Any]) -> None:
    """Write `value` under `key`, entry by entry: a run of some scenarios keeps the numbers
    the others measured earlier."""
    path.parent.mkdir(parents=True, exist_ok=True)
    before = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**before, key: {**before.get(key, {}), **value}}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--scenarios", "--scenario", nargs="+", default=["package_manager"],
        help="scenario names or files (.json / .toml), all (the eight bundled ones) or dev "
        "(the learning check's subset, DEV_SCENARIOS)",
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
    ap.add_argument(
        "--baseline", action="store_true",
        help="k = 0 only: held-out compliance on base + starter, no correction; exit 1 when "
        "a scenario does not start at 0",
    )  # fmt: skip
    ap.add_argument(
        "--forgetting", nargs=2, metavar=("FIRST", "SECOND"),
        help="lessons on FIRST (--corrections), eight of SECOND, FIRST measured again",
    )  # fmt: skip
    ap.add_argument(
        "--skill-tasks", type=int, default=0,
        help="with --forgetting: agent_skill's one-step tasks with and without the adapter",
    )  # fmt: skip
    ap.add_argument(
        "--adapter", type=Path, default=None,
        help="a candidate starter adapter directory instead of the shipped one",
    )  # fmt: skip
    ap.add_argument(
        "--set", dest="settings", type=_setting, action="append", default=[],
        metavar="KEY=VALUE", help="a Settings field for the agent (e.g. steps_per_correction=3)",
    )  # fmt: skip
    ap.add_argument("--tag", default="", help="suffix of the per-scenario result files")
    ap.add_argument(
        "--summary", type=Path, default=None,
        help="write {scenarios: headline numbers} here (the learning check reads it)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if args.adapter is not None:
        import os

        from continual_lsp.policy import model_files

        # The spawned training worker reads the environment; this process is already past it.
        os.environ["CONTINUAL_LSP_STARTER_DIR"] = str(args.adapter.resolve())
        model_files.STARTER_DIR = args.adapter.resolve()
    print(f"CPU: {cpu_model()}", flush=True)
    if args.evidence is not None:
        _merge_evidence(args.evidence, "machine", {"cpu": cpu_model()})
    if args.forgetting:
        first, second = select(args.forgetting)
        result = run_forgetting(first, second, args)
        tag = f"-{args.tag}" if args.tag else ""
        out = REPO / f"bench/learning/results/forgetting-{first.name}-{second.name}{tag}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
        numbers = {k: result[k] for k in ("kept_fraction", "agent_skill_drop")}
        print(
            f"forgetting {first.name} -> {second.name}: first rule {result['first_before']:.2f} "
            f"-> {result['first_after']:.2f} after {result['lessons_second']} lessons of the "
            f"second; {numbers}",
            flush=True,
        )
        if args.evidence is not None:
            measured = {k: v for k, v in numbers.items() if v is not None}
            if measured:
                _merge_evidence(
                    args.evidence, "forgetting", {**measured, "pair": [first.name, second.name]}
                )
        return 0
    if "all" in args.scenarios:
        chosen = SCENARIOS
    elif "dev" in args.scenarios:
        chosen = select(DEV_SCENARIOS)
    else:
        chosen = select(args.scenarios)
    if args.baseline:
        k0 = baseline(chosen, args)
        out = REPO / f"bench/learning/results/k0{'-' + args.tag if args.tag else ''}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(k0, indent=1) + "\n")
        above = sorted(name for name, c in k0.items() if c > 0)
        if above:
            print(f"not at 0% before any correction: {', '.join(above)}")
        return 1 if above else 0
    headlines: dict[str, dict[str, float | None]] = {}
    for scenario in chosen:
        name = scenario.name
        result = run_scenario(scenario, args)
        suffix = "-base" if args.no_starter else (f"-{args.tag}" if args.tag else "")
        out = REPO / f"bench/learning/results/through-agent-{name}-{args.reviewer}{suffix}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
        print_table(result)
        headlines[name] = headline(result)
        print(f"{name}: {headlines[name]}", flush=True)
        if args.summary is not None:
            args.summary.parent.mkdir(parents=True, exist_ok=True)
            args.summary.write_text(json.dumps({"scenarios": headlines}, indent=1) + "\n")
        if args.evidence is not None:  # after every scenario: a long run keeps what it did
            key = "without_starter" if args.no_starter else "scenarios"
            _merge_evidence(args.evidence, key, {name: headlines[name]})
    bars = acceptance(headlines)
    print(
        f"weights learned in {len(bars['learned'])} of {bars['scenarios']} (bar "
        f"{bars['learned_bar']}): {bars['learned']}; retry follows in {len(bars['follows'])} "
        f"(bar {bars['follows_bar']}): {bars['follows']}; met: {bars['met']}",
        flush=True,
    )
    if args.evidence is not None and not args.no_starter:
        _merge_evidence(args.evidence, "acceptance", bars)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
