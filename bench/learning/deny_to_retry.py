"""Deny → retry shown, at the demo's context: what a reviewer waits for after a correction.

    python bench/learning/deny_to_retry.py --denials 10

The demo's setting (`continual-lsp demo`): the sample workspace, its task, its file in
view and its tools, its correction. The agent is built as the server builds it when a
client connects (the policy loads and the training worker starts, warm, in the
background); the first proposal is the reviewer reading, then every proposal is denied
with the demo's correction (the project's way for a fix, else "that is not the bug") and
`decide` is timed until the retry is there: the choice among the N candidates. The SDPO
step that takes the winner as its demonstration runs after the retry is shown (the
editor hears of it by `continual/learned`); the next denial comes at once, so a step may
still run while the next retry is chosen. The first denial is the session's first
correction. Also printed: when the agent handed the retry to its listener, the SDPO
steps' times, the choice's own cost from the agent's `retry_chosen` events (wall time
and this thread's CPU time, which is what it costs on a core of its own however busy the
machine is), the candidates' lengths, the prompt size, and the machine's load average.
Writes `bench/results/deny_to_retry.json`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import bench.learning  # noqa: E402, F401  (the offline, quiet environment)

log = logging.getLogger("deny_to_retry")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1])."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--denials", type=int, default=10)
    ap.add_argument("--json", type=Path, default=REPO / "bench/results/deny_to_retry.json")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")

    from continual_lsp.agent.agent import Agent
    from continual_lsp.config import Settings
    from continual_lsp.demo import DEMO_TOOLS, IN_VIEW, WRONG_CHANGE, fixes_the_bug, preference

    task_text = "Fix the bug in src/calc/ops.py: mean() must use true division."
    work = Path(tempfile.mkdtemp(prefix="deny-to-retry-"))
    ws = work / "ws"
    shutil.copytree(REPO / "examples" / "sample-workspace", ws)
    settings = Settings(
        store_path=str(work / "store.sqlite3"),
        adapters_dir=str(work / "adapters"),
        allowed_tools=DEMO_TOOLS.split(","),
    )
    shown_at: list[float] = []

    agent = Agent(settings, ws)
    # When the agent hands each proposal to its listener (in the product, the server).
    agent.listener.on_proposal = lambda proposal: shown_at.append(time.perf_counter())  # type: ignore[method-assign]
    waits: list[float] = []  # denials answered by a retry
    ended: list[float] = []  # denials that ended the task (past max_retries): no retry
    handed: list[float] = []
    prompt_tokens: list[int] = []
    load = [os.getloadavg()[0]]
    try:
        agent.policy  # noqa: B018  (as the server does on connect: model + warm worker)
        _, proposal = agent.start_task(task_text, [IN_VIEW])
        ready_at_first = agent.training.worker_ready
        empty_tasks = 0
        while len(waits) < args.denials:
            if proposal is None:
                # The task ended (say, on calls that cannot run): a new one, a few times.
                empty_tasks += 1
                status = agent.store.events(kind="task_status")
                log.info("task ended: %s", status[-1]["payload"]["summary"] if status else "?")
                if empty_tasks > 3:
                    log.warning("%d tasks in a row showed nothing; stopping", empty_tasks)
                    break
                _, proposal = agent.start_task(task_text, [IN_VIEW])
                continue
            empty_tasks = 0
            row = agent.store.proposal(proposal.id)
            prompt_tokens.append(len(row["prompt_tokens"]) if row else 0)
            # The demo reviewer's correction: the project's way for a fix, else the bug.
            diff = proposal.preview.diff if proposal.preview else None
            fixes = fixes_the_bug({"diff": diff})
            correction = preference(proposal.call.tool)[0] if fixes else WRONG_CHANGE
            t0 = time.perf_counter()
            outcome = agent.decide(proposal.id, "deny", correction=correction)
            wait = time.perf_counter() - t0
            load.append(os.getloadavg()[0])
            proposal = outcome.next_proposal
            if proposal is None:
                ended.append(wait)
                log.info("deny → task ended (%s) in %.2f s", outcome.task_done, wait)
                continue
            waits.append(wait)
            handed.append(next((t - t0 for t in shown_at if t > t0), wait))
            log.info("deny %d → retry in %.2f s (load %.1f)", len(waits), wait, load[-1])
        deadline = time.monotonic() + 600
        while agent.store.queue_depth(("sdpo",)) and time.monotonic() < deadline:
            time.sleep(0.2)  # the last steps, for their times below
        events = [e["payload"] for e in agent.store.events(kind="retry_chosen")]
        chosen = [e["seconds"] for e in events]
        chosen_cpu = [e.get("cpu_seconds") for e in events]
        lengths = [e.get("tokens") for e in events]
        steps = [a.get("metrics", {}).get("seconds") for a in agent.store.adapters()]
    finally:
        agent.close()
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "p50_s": round(percentile(waits, 0.5), 2),
        "p90_s": round(percentile(waits, 0.9), 2),
        "first_correction_s": round(waits[0], 2),
        # Wall time depends on what else the machine runs; the choice's CPU time is what
        # it costs on a core of its own.
        "choice_cpu_p50_s": round(percentile([c for c in chosen_cpu if c is not None], 0.5), 2),
        "choice_cpu_p90_s": round(percentile([c for c in chosen_cpu if c is not None], 0.9), 2),
        "load_average_1min": round(sum(load) / len(load), 1),
        "candidates": settings.retry_candidates,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"\ndeny → retry shown, {len(waits)} denials, demo context ({settings.retry_candidates} candidates)"
    )
    print(f"  {result}")
    print(f"  every wait (s): {[round(w, 2) for w in waits]}")
    print(f"  denials that ended the task instead (not in the percentiles), s: {ended}")
    print(f"  worker had loaded its model by the first denial: {ready_at_first}")
    print(
        f"  retry handed to the server (it shows it with the response), s: {[round(h, 2) for h in handed]}"
    )
    print(f"  choosing the retry (N candidates + scoring), s: {[round(c, 2) for c in chosen]}")
    print(f"  … of which this thread's CPU time (a core of its own), s: {chosen_cpu}")
    print(f"  the candidates' lengths (tokens; the batch runs to the longest): {lengths}")
    print(f"  SDPO steps in the worker, s: {steps}")
    print(f"  prompt tokens: {prompt_tokens}")
    print(
        f"  load average (1 min) during the run: {[round(x, 1) for x in load]}; cores: {os.cpu_count()}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
