"""Bench: one SDPO step vs context length, prefix-cached vs full backprop (printed, not a test).

For each context length (default 512, 1k, 2k, 4k prompt tokens) and a ~100-token denied
call, runs `sdpo_step` (teacher + student scoring, grammar masks, one LoRA step with KL
to the reference) `--reps` times per mode in one fresh spawned process per length.
Prints p50/p90 wall time of the whole step, p50 of the train_step part, p50 process CPU
seconds (all threads), the peak RSS during that mode's steps (sampled every 10 ms from
/proc), and the full/cached ratios.

    python bench/sdpo_step.py [--sizes 512 1024 2048 4096] [--reps 5] [--threads N]
                              [--interleave]

Each step carries the starter's anchors as the training worker's do (`anchors_per_step`,
the next ones in turn), and after it, timed apart, the worker's anchor gate
(`anchors.skill_cost`): the `gate` column, and `p50_gate_s_2k` in the JSON. Mode
`bare` is `warmed` without either (what a step cost before them; `--modes warmed bare`
prints the ratio).

Mode `warmed` is `cached` plus what the training worker does between jobs: after each
step, untimed, it recomputes the prompt's K/V, and the next step's anchors', under the
new weights (`worker.warm_for_next_job`), as happens while the reviewer reads the retry. Compare it
with `cached` (`--modes cached warmed`): the next correction on the same or a longer
prompt then skips re-reading it.

Default order: every cached step, then every full step, so the cached peak RSS is clean
(the allocator keeps memory a full-backprop step took). `--interleave` alternates the
modes (cached, full, cached, …) so that load from other processes on a shared machine
hits both alike; the cached RSS then includes what the full steps left. On a shared,
oversubscribed machine prefer `--threads 1` and the CPU-seconds column: a single
thread does not spin-wait, so its CPU time is close to the work itself.

The prompt is a realistic conversation: a task, then a long tool result (source code)
padded to the target length. Repetitions are steps on the same situation, so from the
second step on the reference prefix is served from the cache (its weights are frozen),
as it is when the reviewer denies several retries of one turn.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

CODE = '''def add(a, b):
    """Return the sum of a and b."""
    return a - b


def mul(a, b):
    return a * b

'''


def _situation(policy: Any, context: int) -> tuple[list[int], list[int]]:
    from continual_lsp.policy.base import Message
    from continual_lsp.tools.base import ToolCall

    renderer = policy.renderer
    body = ""
    while True:
        messages = [
            Message(role="user", content="Fix add() in src/calc/ops.py: it returns a - b."),
            Message(
                role="assistant", content='{"tool":"read","arguments":{"path":"src/calc/ops.py"}}'
            ),
            Message(role="tool", content=body),
        ]
        prompt = renderer.render_prompt(messages)
        if len(prompt) >= context:
            break
        body += CODE * max(1, (context - len(prompt)) // 60)
    # Not cut to `context` from the left: every agent prompt starts with the system
    # prompt, which the anchors share with it (cut, they shared nothing: +0.8 s a step).
    content = "def add(a, b):\n    return a + b\n"
    while (
        len(
            renderer.render_call(
                ToolCall(tool="write", arguments={"path": "src/calc/ops.py", "content": content})
            )
        )
        < 100
    ):
        content += "# keep the other helpers unchanged\n"
    call = renderer.render_call(
        ToolCall(tool="write", arguments={"path": "src/calc/ops.py", "content": content})
    )
    return prompt, call


class _PeakRss:
    """Peak resident set size while the block runs, sampled from /proc/self/statm."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")

    def _rss(self) -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * self._page

    def _loop(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self._rss())

    def __enter__(self) -> _PeakRss:
        self.peak = self._rss()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())


def _run(
    context: int, modes: list[str], reps: int, threads: int, interleave: bool, out: Any
) -> None:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch

    from continual_lsp.config import Settings
    from continual_lsp.learning.anchors import anchor_datums, skill_cost
    from continual_lsp.learning.sdpo import SdpoJob, sdpo_step
    from continual_lsp.learning.worker import warm_for_next_job
    from continual_lsp.policy.local.local_policy import LocalPolicy

    settings = Settings()
    policy = LocalPolicy(settings)
    torch.set_num_threads(threads)
    prompt, call = _situation(policy, context)
    job = SdpoJob(
        proposal_id="bench",
        prompt_tokens=prompt,
        tokens=call,
        logprobs=policy.logprobs(prompt, call),
        correction="Do not rewrite the whole file; edit only the line that is wrong.",
        signal="deny",
    )
    results: dict[str, dict[str, Any]] = {
        m: {"totals": [], "trains": [], "cpu": [], "gates": [], "rss": 0} for m in modes
    }
    # One untimed step first: the first backward of a process pays one-off kernel and
    # allocator set-up (~2x a steady step), which would land on whichever mode runs first.
    sdpo_step(policy, job, settings, anchors=anchor_datums(settings, 0))
    skill_cost(policy, settings)  # its reference side is computed once per process
    if interleave:
        order = [m for _ in range(reps) for m in modes]
    else:
        order = [m for m in modes for _ in range(reps)]
    for step, mode in enumerate(order, start=1):
        r = results[mode]
        anchors = anchor_datums(settings, step) if mode != "bare" else []
        with _PeakRss() as rss:
            start, cpu = time.perf_counter(), time.process_time()
            metrics = sdpo_step(policy, job, settings, anchors=anchors, prefix_cache=mode != "full")
            r["totals"].append(time.perf_counter() - start)
            r["cpu"].append(time.process_time() - cpu)
            start = time.perf_counter()
            if mode != "bare":
                skill_cost(policy, settings)
            r["gates"].append(time.perf_counter() - start)
        r["trains"].append(metrics.seconds)
        r["rss"] = max(r["rss"], rss.peak / 2**20)
        if mode in ("warmed", "bare"):
            # Untimed, as in the worker: done while the reviewer reads the retry, with the
            # next step's anchors.
            upcoming = anchor_datums(settings, step + 1) if mode != "bare" else []
            warm_for_next_job(policy, {"payload": job.model_dump()}, upcoming)
    out.send({"prompt": len(prompt), "call": len(call), "modes": results})


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--modes",
        nargs="+",
        default=["cached", "full"],
        choices=["cached", "warmed", "full", "bare"],
    )
    parser.add_argument("--interleave", action="store_true", help="alternate the modes per rep")
    parser.add_argument(
        "--json",
        default="",
        help="write the 2k p50 step wall times of the cached and warmed modes here"
        " (bench/results/sdpo_step.json; issue 34's goal: warmed <= 2 s)",
    )
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    from continual_lsp.policy.model_files import cpu_model

    print(
        f"sdpo_step bench on {cpu_model()}: {args.threads} threads, {args.reps} reps,"
        f" load avg {os.getloadavg()}",
        file=sys.stderr,
    )
    print(
        f"{'context':>8} {'call':>5} {'mode':>7} {'p50 step':>9} {'p90 step':>9}"
        f" {'p50 train':>10} {'p50 CPU s':>10} {'p50 gate':>9} {'peak RSS':>9}"
    )
    rows: dict[int, dict[str, Any]] = {}
    for size in args.sizes:
        parent, child = ctx.Pipe()
        proc = ctx.Process(
            target=_run, args=(size, args.modes, args.reps, args.threads, args.interleave, child)
        )
        proc.start()
        result = parent.recv()
        proc.join()
        rows[size] = result["modes"]
        for mode, r in result["modes"].items():
            print(
                f"{result['prompt']:>8} {result['call']:>5} {mode:>7}"
                f" {statistics.median(r['totals']):>8.2f}s {_pct(r['totals'], 0.9):>8.2f}s"
                f" {statistics.median(r['trains']):>9.2f}s {statistics.median(r['cpu']):>9.2f}s"
                f" {statistics.median(r['gates']):>8.2f}s"
                f" {r['rss']:>7.0f}MB",
                flush=True,
            )
    if {"cached", "full"} <= set(args.modes):
        print("\nfull / cached (p50 step wall, p50 train_step wall, p50 step CPU, peak RSS):")
        for size, modes in rows.items():
            c, f = modes["cached"], modes["full"]

            def ratio(key: str, f: dict[str, Any] = f, c: dict[str, Any] = c) -> float:
                return statistics.median(f[key]) / statistics.median(c[key])

            print(
                f"{size:>8}: step x{ratio('totals'):.2f}, train x{ratio('trains'):.2f},"
                f" CPU x{ratio('cpu'):.2f}, RSS x{f['rss'] / c['rss']:.2f}"
            )
    if {"cached", "warmed"} <= set(args.modes):
        print("\ncached / warmed (p50 step wall, p50 step CPU):")
        for size, modes in rows.items():
            c, w = modes["cached"], modes["warmed"]
            print(
                f"{size:>8}: step x{statistics.median(c['totals']) / statistics.median(w['totals']):.2f},"
                f" CPU x{statistics.median(c['cpu']) / statistics.median(w['cpu']):.2f}"
            )
    if {"warmed", "bare"} <= set(args.modes):
        print("\nwarmed / bare (p50 step wall; + the gate):")
        for size, modes in rows.items():
            w, b = modes["warmed"], modes["bare"]
            step = statistics.median(w["totals"]) / statistics.median(b["totals"])
            job = statistics.median([t + g for t, g in zip(w["totals"], w["gates"], strict=True)])
            print(
                f"{size:>8}: step x{step:.2f}, step + gate x{job / statistics.median(b['totals']):.2f}"
            )
    print(f"load avg after: {os.getloadavg()}", file=sys.stderr)
    if args.json:
        at_2k = rows[2048]
        out: dict[str, Any] = {
            f"p50_s_2k_{m}": round(statistics.median(at_2k[m]["totals"]), 3) for m in at_2k
        }
        gates = [g for name, m in at_2k.items() if name != "bare" for g in m["gates"]]
        out["p50_gate_s_2k"] = round(statistics.median(gates), 3)
        out["cpu"] = cpu_model()
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
