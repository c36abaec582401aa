"""Time to a proposal on the embedded model: render the prompt, decode one call, parse it.

    python bench/propose.py [--temperature 0] [--threads N] [--repeats 1]
                            [--file-candidates 1 4] [--out bench/results/propose_candidates.json]

Prints one row per task (seconds, prompt tokens, completion tokens, how many the grammar
forced vs how many were decoded one by one), then p50 / p90 and the forced share. One
untimed warm-up proposal runs first: the first forward pass pays one-off allocation costs
that a running server pays once at start-up. Prompts share the system prompt, so after the
warm-up the prompt cache spares its prefill, as it does between an agent's turns.
Goal: p50 <= 3 s on 2 CPU cores. On a shared machine read the cpu column too: the wall
time there mostly measures the neighbours.

With --file-candidates N...: a file-change turn (the task, src/calc/ops.py read in view)
timed as the agent runs it with `Settings.file_candidates` = N: the model's call, then
N - 1 warmer file changes in one batch, each previewed and parse-checked (tools.checks);
N = 1 is the call alone. p50 per N goes to --out with the CPU model (goal: p50 <= 1 s on
2 cores), beside the same turns without prompt-lookup drafts (`draft_tokens` 0), and one
run of the sample's failing test on a copy of the workspace (what each tried candidate
adds when a test failed) beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.tasks import SAMPLE_TASKS
from continual_lsp.policy.model_files import cpu_model

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample-workspace"
FAILING_TEST = "PYTHONPATH=src python3 -m pytest -q tests/test_ops.py"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): no interpolation on 10 samples."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument(
        "--threads", type=int, default=0, help="torch threads (0: LocalPolicy's default)"
    )
    parser.add_argument("--repeats", type=int, default=1, help="passes over the 10 tasks")
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--no-prompt-cache", action="store_true", help="prefill every prompt")
    parser.add_argument(
        "--dtype", choices=["auto", "float32", "bfloat16"], default="auto",
        help="Settings.sample_dtype (the agent's default: auto)",
    )  # fmt: skip
    parser.add_argument(
        "--file-candidates", type=int, nargs="*", default=[],
        help="time a file-change turn with each N candidates (Settings.file_candidates)",
    )  # fmt: skip
    parser.add_argument("--out", default="bench/results/propose_candidates.json")
    args = parser.parse_args()

    import torch

    from continual_lsp.config import Settings
    from continual_lsp.policy.base import Completion, Message, SampleParams
    from continual_lsp.policy.factory import make_policy
    from continual_lsp.policy.local.local_policy import LocalPolicy
    from continual_lsp.policy.model_files import resolve_dtype

    start = time.perf_counter()
    # As an agent builds it: the shared model, in the precision the agent samples in.
    policy = make_policy(Settings(sample_dtype=args.dtype), shared=True)
    assert isinstance(policy, LocalPolicy)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"model loaded + LoRA wrapped + grammar compiled in {time.perf_counter() - start:.1f} s; "
        f"torch threads {torch.get_num_threads()}, cpu_count {os.cpu_count()}; "
        # auto: timed once per CPU model (model_files.measured_cpu_dtype)
        f"dtype {resolve_dtype(args.dtype, 'cpu')} ({args.dtype})"
    )

    def propose(task: str, seed: int) -> tuple[float, float, int, Completion, str]:
        if args.no_prompt_cache:
            policy.prompt_cache.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        prompt = policy.renderer.render_prompt([Message(role="user", content=f"Task: {task}")])
        params = SampleParams(temperature=args.temperature, seed=seed, max_tokens=args.max_tokens)
        completion = policy.sample(prompt, params)
        try:
            tool = policy.renderer.parse_call(completion.text).tool
        except ValueError:
            tool = "INVALID"
        return time.perf_counter() - t0, time.process_time() - c0, len(prompt), completion, tool

    propose("read README.md", 0)  # warm-up, untimed

    rows: list[tuple[float, float, int, int]] = []
    print(
        f"\n{'task':<44} {'tool':<10} {'wall s':>6} {'cpu s':>6} {'prompt':>6} "
        f"{'tokens':>6} {'forced':>6} {'decoded':>7}"
    )
    for repeat in range(args.repeats):
        for i, task in enumerate(SAMPLE_TASKS):
            seconds, cpu, prompt_len, completion, tool = propose(task, seed=i + 100 * repeat)
            tokens, forced = len(completion.tokens), completion.forced
            rows.append((seconds, cpu, tokens, forced))
            print(
                f"{task[:44]:<44} {tool:<10} {seconds:6.2f} {cpu:6.2f} {prompt_len:6d} "
                f"{tokens:6d} {forced:6d} {tokens - forced:7d}"
            )
    times = [r[0] for r in rows]
    cpus = [r[1] for r in rows]
    total = sum(r[2] for r in rows)
    forced_total = sum(r[3] for r in rows)
    print(
        f"\nproposals {len(rows)}  wall p50 {percentile(times, 50):.2f} s  "
        f"p90 {percentile(times, 90):.2f} s  mean {statistics.mean(times):.2f} s"
    )
    # CPU seconds of this process. With one thread and busy neighbours this is close to
    # what the wall time would be on an idle core; the wall time is not.
    print(
        f"cpu  p50 {percentile(cpus, 50):.2f} s  p90 {percentile(cpus, 90):.2f} s  "
        f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    print(
        f"tokens {total}: forced {forced_total}, decoded {total - forced_total}; "
        f"forced / total = {forced_total / max(1, total):.2f}"
    )
    cache = policy.prompt_cache
    print(f"prompt cache: {cache.hits} hits, {cache.reused_tokens} prompt tokens not recomputed")
    if args.file_candidates:
        file_change_turns(policy, args)
    return 0


def file_change_turns(policy: Any, args: argparse.Namespace) -> None:
    """p50 of a file-change turn with N candidates, beside N = 1; written to --out."""
    import json
    import shutil
    import tempfile

    import torch

    from continual_lsp.agent.candidates import Candidate
    from continual_lsp.agent.trials import first_passing
    from continual_lsp.config import Settings
    from continual_lsp.policy.base import Message, SampleParams
    from continual_lsp.tools import ToolCall, ToolError, ToolRunner, checks

    workspace = Path(tempfile.mkdtemp(prefix="propose-bench-")) / "ws"
    shutil.copytree(SAMPLE, workspace)
    settings = Settings(sandbox="none", allow_unsandboxed=True)
    runner = ToolRunner(workspace, settings)
    read = ToolCall(tool="read", arguments={"path": "src/calc/ops.py"})
    in_view = policy.renderer.turn_messages(read, runner.execute(read))
    renderer = policy.renderer

    def checked(text: str) -> bool:
        """Parse, preview and parse-check one candidate (the agent's screen)."""
        try:
            call = renderer.parse_call(text)
            preview = runner.preview(call)
        except (ValueError, ToolError):
            return False
        return (
            preview is None
            or checks.breaks(preview.path, preview.old_content, preview.new_content) is None
        )

    def turn(task: str, n: int, seed: int) -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        prompt = renderer.render_prompt([Message(role="user", content=f"Task: {task}"), *in_view])
        first = policy.sample(prompt, SampleParams(seed=seed, max_tokens=args.max_tokens))
        texts = [first.text]
        if n > 1:
            params = SampleParams(
                temperature=0.8, seed=seed, max_tokens=args.max_tokens,
                tools=["write", "edit", "edit_lines"],
            )  # fmt: skip
            texts += [c.text for c in policy.sample_batch(prompt, params, n - 1)]
        for text in texts:
            checked(text)
        return time.perf_counter() - t0, time.process_time() - c0

    def timed(n: int, draft: int) -> dict[str, float]:
        policy.settings = policy.settings.model_copy(update={"draft_tokens": draft})
        rows = [turn(task, n, seed=i) for i, task in enumerate(SAMPLE_TASKS)]
        walls, cpus = [r[0] for r in rows], [r[1] for r in rows]
        print(
            f"N = {n}, drafts {draft}: wall p50 {percentile(walls, 50):.2f} s  "
            f"p90 {percentile(walls, 90):.2f} s  cpu p50 {percentile(cpus, 50):.2f} s"
        )
        return {
            "p50_s": round(percentile(walls, 50), 3),
            "p90_s": round(percentile(walls, 90), 3),
            "cpu_p50_s": round(percentile(cpus, 50), 3),
        }

    drafts = policy.settings.draft_tokens
    print(f"\nfile-change turns, ops.py in view ({len(SAMPLE_TASKS)} tasks each)")
    # The baseline of the same run: the same turns decoded without prompt-lookup drafts.
    results = {str(n): timed(n, drafts) for n in args.file_candidates}
    baseline = {str(n): timed(n, 0) for n in args.file_candidates}
    for n in args.file_candidates:
        ratio = results[str(n)]["p50_s"] / max(1e-9, baseline[str(n)]["p50_s"])
        results[str(n)]["ratio_to_no_drafts"] = round(ratio, 3)
        print(f"N = {n}: drafts {drafts} / no drafts = {ratio:.2f}")
    fix = ToolCall(
        tool="edit_lines",
        arguments={"path": "src/calc/ops.py", "start": 7, "end": 7,
                   "content": "    return sum(values) / len(values)\n"},
    )  # fmt: skip
    started = time.perf_counter()
    trial = first_passing(
        workspace, FAILING_TEST, [Candidate(fix, None, [], runner.preview(fix))], settings
    )
    trial_s = time.perf_counter() - started
    print(
        f"one trial of `{FAILING_TEST}` on a copy: {trial_s:.2f} s (passed: {bool(trial.passed)})"
    )
    report = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": round(os.getloadavg()[0], 2),
        "tasks": len(SAMPLE_TASKS),
        "goal_p50_s": 1.0,
        "draft_tokens": drafts,
        "file_candidates": results,
        "file_candidates_no_drafts": baseline,
        "trial_run_s": round(trial_s, 3),
        "trial_passed": trial.passed is not None,
    }
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"cpu: {report['cpu']}; wrote {args.out}")


if __name__ == "__main__":
    raise SystemExit(main())
