"""Time to a proposal on the embedded model: render the prompt, decode one call, parse it.

    python bench/propose.py [--temperature 0] [--threads N] [--repeats 1]

Prints one row per task (seconds, prompt tokens, completion tokens, how many the grammar
forced vs how many were decoded one by one), then p50 / p90 and the forced share. One
untimed warm-up proposal runs first: the first forward pass pays one-off allocation costs
that a running server pays once at start-up. Prompts share the system prompt, so after the
warm-up the prompt cache spares its prefill, as it does between an agent's turns.
Goal: p50 <= 3 s on 2 CPU cores. On a shared machine read the cpu column too: the wall
time there mostly measures the neighbours.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.tasks import SAMPLE_TASKS


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
    args = parser.parse_args()

    import torch

    from continual_lsp.config import Settings
    from continual_lsp.policy import make_policy
    from continual_lsp.policy.base import Completion, Message, SampleParams
    from continual_lsp.policy.local import LocalPolicy
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
