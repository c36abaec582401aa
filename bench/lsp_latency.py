"""Latency of textDocument/codeAction and continual/status, idle vs while a training step
runs, in the same server run (printed; not a test). Goal: p99 ≤ 20 ms while training and
while sampling. Writes bench/results/lsp_latency.json.

    python bench/lsp_latency.py [--requests 200]

The server runs over stdio with training on. During a `continual/decide` deny this
client keeps asking, and each answer is filed under a phase by the last status seen:
"deciding" before the SDPO job is queued (the decision is committed and routed),
"training" while it is queued or running in the worker process (queueDepth > 0), then
"sampling" while the agent samples the retry with the new adapter in the server process.
The machine's load average is printed: on a shared machine it is most of the story.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lsprotocol import types as lsp  # noqa: E402

from tests.server.harness import Editor  # noqa: E402


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] if ordered else 0.0


def percentiles(samples: list[float]) -> str:
    if not samples:
        return "no samples"
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    return f"n={len(ordered):4d}  p50={p50 * 1000:6.2f} ms  p99={p99(ordered) * 1000:6.2f} ms  max={ordered[-1] * 1000:6.2f} ms"


async def measure(
    editor: Editor, uri: str, stop: asyncio.Event | None, count: int
) -> dict[str, dict[str, list[float]]]:
    """Latencies by phase: "training" while the SDPO job is queued or running (status
    says queueDepth > 0), "sampling" after it, while the retry is sampled in-process."""
    out: dict[str, dict[str, list[float]]] = {}
    phase = "idle" if stop is None else "deciding"
    i = 0
    while (stop is None and i < count) or (stop is not None and not stop.is_set()):
        kind = "codeAction" if i % 2 == 0 else "status"
        start = time.perf_counter()
        if kind == "codeAction":
            await editor.code_actions(uri, 6)
        else:
            status = await editor.request("continual/status", {})
        elapsed = time.perf_counter() - start
        out.setdefault(phase, {"codeAction": [], "status": []})[kind].append(elapsed)
        if kind == "status" and stop is not None:
            if status["queueDepth"] > 0:
                phase = "training"
            elif phase == "training":
                phase = "sampling"
        i += 1
        await asyncio.sleep(0.005)  # an editor asks often, not in a tight loop
    return out


async def main(args: argparse.Namespace) -> None:
    load_start = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="lsp-latency-"))
    workspace = tmp / "ws"
    shutil.copytree(REPO / "examples" / "sample-workspace", workspace)
    editor = Editor(workspace, understands_proposals=True)
    await editor.start_stdio(
        tmp / "store.sqlite3", "--training", "--sandbox", "bwrap", "--review-reads"
    )
    try:
        await editor.initialize()
        uri = editor.open("src/calc/ops.py")
        t0 = time.perf_counter()
        await editor.request(
            "continual/startTask", {"text": "fix mean() so that test_mean passes"}, timeout=600
        )
        proposal = await editor.wait_for("continual/proposal", timeout=600)
        print(
            f"first proposal: {proposal['tool']} after {time.perf_counter() - t0:.1f}s (model load included)"
        )

        idle = await measure(editor, uri, None, args.requests)

        stop = asyncio.Event()
        busy_task = asyncio.create_task(measure(editor, uri, stop, 0))
        t1 = time.perf_counter()
        result = await editor.request(
            "continual/decide",
            {
                "proposalId": proposal["proposalId"],
                "decision": "deny",
                "correction": "Change only the line with the bug, with edit_lines.",
            },
            timeout=600,
        )
        stop.set()
        busy = await busy_task
        window = time.perf_counter() - t1
        steps = [p for p in editor.notes[lsp.PROGRESS]]
        print(
            f"deny → learned {result.get('learned')} in {window:.1f}s; $/progress messages: {len(steps)}"
        )
        phases = {**idle, **busy}
        for phase in ("idle", "deciding", "training", "sampling"):
            for kind in ("codeAction", "status"):
                print(f"{kind:10s} {phase:8s} {percentiles(phases.get(phase, {}).get(kind, []))}")
        idle_p99 = {k: p99(v) for k, v in phases["idle"].items()}
        for phase in ("training", "sampling"):
            for kind in ("codeAction", "status"):
                got = p99(phases.get(phase, {}).get(kind, []))
                ratio = got / idle_p99[kind] if idle_p99[kind] else float("nan")
                print(f"p99 {kind} {phase} / idle: {ratio:.2f}")
        evidence = {
            "status_p99_ms_training": round(
                p99(phases.get("training", {}).get("status", [])) * 1000, 2
            ),
            "code_action_p99_ms_training": round(
                p99(phases.get("training", {}).get("codeAction", [])) * 1000, 2
            ),
            "status_p99_ms_sampling": round(
                p99(phases.get("sampling", {}).get("status", [])) * 1000, 2
            ),
        }
        worst = max(evidence.values())
        verdict = "met" if worst <= 20 else "NOT met"
        print(f"goal p99 ≤ 20 ms while training and sampling: {verdict} ({worst:.2f} ms)")
        print(
            f"load average (1 min) at start {load_start:.2f}, at end {os.getloadavg()[0]:.2f}, "
            f"on {os.cpu_count()} cores"
        )
        out = REPO / "bench" / "results" / "lsp_latency.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(evidence, indent=2) + "\n")
        print(f"wrote {out.relative_to(REPO)}: {evidence}")
    finally:
        await editor.stop(quiet=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    asyncio.run(main(parser.parse_args()))
