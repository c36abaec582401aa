"""What decoding paths from the workspace's files costs a turn (Settings.decode_paths_limit).

    python bench/decode_paths.py [--sizes 10 200 2000] [--repeats 5]

For workspaces of N files (generated under a temporary folder): the walk that lists them
(`ToolRunner.listed_files`, run on every turn), compiling the grammar for a file list not
seen before (every created file makes one), and one greedy proposal on the embedded model
with the list against the same proposal without it. Prints medians and the ratio to the
unconstrained proposal of the same run, and the call each made: with a list the path is
forced sooner, so the two proposals need not be the same call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TASK = "Task: Fix the bug in pkg0/module_3.py: mean() must use true division."


def median_seconds(fn: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 200, 2000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from continual_lsp.config import Settings
    from continual_lsp.policy.base import DecodeRestrictions, Message, SampleParams
    from continual_lsp.policy.factory import make_policy
    from continual_lsp.policy.local.local_policy import LocalPolicy
    from continual_lsp.tools.runner import ToolRunner

    policy = make_policy(Settings(), shared=True)
    assert isinstance(policy, LocalPolicy)
    prompt = policy.renderer.render_prompt([Message(role="user", content=TASK)])
    policy.sample(prompt, SampleParams(max_tokens=96))  # warm-up: allocation, prompt cache

    calls: list[str] = []

    def propose(forbid: DecodeRestrictions | None) -> None:
        calls.append(policy.sample(prompt, SampleParams(max_tokens=96, forbid=forbid)).text)

    base = median_seconds(lambda: propose(None), args.repeats)
    print(f"proposal without a file list: {base:.3f} s (median of {args.repeats}): {calls[-1]}")
    print(
        "files | list the workspace | compile a new grammar | proposal with the list | ratio | call"
    )
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            for i in range(size):
                path = root / f"pkg{i // 50}" / f"module_{i}.py"
                path.parent.mkdir(exist_ok=True)
                path.write_text("def f():\n    return 1\n")
            runner = ToolRunner(root, Settings(sandbox="none"))
            listing = median_seconds(lambda r=runner, n=size: r.listed_files(n), args.repeats)
            files = runner.listed_files(size)
            assert files is not None and len(files) == size

            def compile_new(files: list[str] = files) -> None:
                policy.host.grammars.clear()
                policy.grammar_for(None, DecodeRestrictions(files=files))

            compiling = median_seconds(compile_new, args.repeats)
            forbid = DecodeRestrictions(files=files)
            with_list = median_seconds(lambda f=forbid: propose(f), args.repeats)
            print(
                f"{size:5d} | {listing * 1000:8.1f} ms | {compiling * 1000:8.1f} ms | "
                f"{with_list:.3f} s | {with_list / base:.2f} | {calls[-1]}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
