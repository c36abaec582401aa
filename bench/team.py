"""A team server's load on one machine (issue 20): 20 users, one base model, 20 adapters.

    nice -n 15 python bench/team.py [--users 20] [--repeats 2]

What runs: the users are in-process `Agent`s of one Python process, as a TCP server holds
them (one per user, each with its own store, workspace and adapter directory), without
the sockets: spawning 20 servers would measure 20 processes, not the sharing. Each user
gets an adapter of its own (LoRA B matrices set to seeded noise, saved as version v0001
in that user's store), served by `sync_sampler` as after a restart. Training is off: the
adapters are made here, and the training workers (a process per user, or one for all with
`shared_training`) are outside what this measures. Autonomy is `manual`, so one
`start_task` is one proposal (no reads run on their own).

Measured:
- `rss_mb`: this process's resident memory (VmRSS) with all users live, after every user
  proposed at least once and the latency runs (prompt caches filled).
- `budget_mb`: one base model + `users` adapters + 500 MB (the issue's bound), the model
  and adapter sizes counted from their tensors.
- `rss_mb_before`: one model per agent, the way it was: a child process builds 1, 2, 3
  private `LocalPolicy`s (each loads the model, as every Agent did) and reads its RSS
  after each; extrapolated linearly to `users` (rss(1) + (users - 1) × the mean step).
- `wrong_adapter`: proposals whose sampling log-probs do not match their own user's
  adapter, re-scored by an independent model copy with that version file loaded
  (|Δ| ≤ 1e-3 per token); the same check under the next user's adapter must fail, else
  the check had no power (`indistinct`).
- `p50_s` / `p90_s`: wall time of `start_task` (prompt, constrained decode, preview)
  with 1, 4 and 8 users asking at once (threads), each over different tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.propose import percentile
from bench.tasks import SAMPLE_TASKS

ROOT = Path(__file__).resolve().parent.parent

WORKSPACE = ROOT / "examples" / "sample-workspace"
RESULT = ROOT / "bench" / "results" / "team.json"
TOLERANCE = 1e-3  # per-token |Δ logprob|: cache hits and batching differ by ~1e-5
MB = 1 << 20


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status (Linux only)")


def measure_before(count: int) -> None:
    """Child process: `count` private policies, one model each; prints RSS after each."""
    from continual_lsp.config import Settings
    from continual_lsp.policy.local import LocalPolicy

    held, out = [], []
    for _ in range(count):
        held.append(LocalPolicy(Settings()))
        out.append(rss_mb())
    print(json.dumps(out))


def before_figure(users: int) -> tuple[float, list[float]]:
    child = subprocess.run(
        [sys.executable, __file__, "--measure-before", "3"],
        capture_output=True,
        text=True,
        check=True,
    )
    series = json.loads(child.stdout.strip().splitlines()[-1])
    step = (series[-1] - series[0]) / (len(series) - 1)
    return series[0] + (users - 1) * step, series


def make_users(root: Path, users: int) -> list[Any]:
    """`users` agents on the process's shared host, each serving its own adapter v0001."""
    import torch

    from continual_lsp.agent.agent import Agent
    from continual_lsp.config import Settings
    from continual_lsp.policy.local import LocalPolicy
    from continual_lsp.policy.model_host import shared_host
    from continual_lsp.store import Store

    agents = []
    for i in range(users):
        name = f"user{i:02d}"
        home = root / "users" / name
        workspace = home / "ws"
        shutil.copytree(WORKSPACE, workspace)
        settings = Settings(
            user=name,
            store_path=str(home / "store.sqlite3"),
            adapters_dir=str(home / "adapters"),
            enable_training=False,
            autonomy="manual",
            sandbox="none",
            allow_unsandboxed=True,
        )
        # The adapter is written by a throwaway policy on the same host (its slot goes
        # with it), then registered as this user's newest version.
        maker = LocalPolicy(settings, host=shared_host(settings))
        generator = torch.Generator().manual_seed(1000 + i)
        with maker.exclusive(), torch.no_grad():
            for param_name, param in maker.model.named_parameters():
                if "lora_B" in param_name:
                    param.copy_(0.02 * torch.randn(param.shape, generator=generator))
        info = maker.save_adapter("v0001")
        del maker
        store = Store(settings.store_file())
        store.add_adapter(info.name, info.path, info.sha256, None, {"bench": "team"})
        agent = Agent(settings, workspace, store=store)
        _ = agent.policy  # loads (shares) the model and serves v0001
        agents.append(agent)
    return agents


def propose(agent: Any, task: str, made: list[str]) -> float:
    """Seconds to `agent`'s first proposal for `task`; its id is appended to `made`."""
    start = time.perf_counter()
    _task_id, proposal = agent.start_task(task)
    seconds = time.perf_counter() - start
    if proposal is not None:
        made.append(proposal.id)
    return seconds


def concurrent_latency(
    agents: list[Any], made: list[list[str]], active: int, repeats: int
) -> list[float]:
    times: list[float] = []
    lock = threading.Lock()

    def run(k: int) -> None:
        for r in range(repeats):
            seconds = propose(agents[k], SAMPLE_TASKS[(k + r) % len(SAMPLE_TASKS)], made[k])
            with lock:
                times.append(seconds)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(active)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times


def check_adapters(agents: list[Any], made: list[list[str]]) -> tuple[int, int, int]:
    """(checked, wrong_adapter, indistinct) over every proposal the bench got."""
    from continual_lsp.config import Settings
    from continual_lsp.policy.local import LocalPolicy

    checker = LocalPolicy(Settings())  # an independent copy of the model
    checked = wrong = indistinct = 0
    paths = [a.store.current_adapter()["path"] for a in agents]
    for i, agent in enumerate(agents):
        for proposal_id in made[i]:
            proposal = agent.store.proposal(proposal_id)
            tokens, stored = proposal["tokens"], proposal["logprobs"]
            if not tokens:
                continue
            checked += 1
            scores = {}
            for j in (i, (i + 1) % len(agents)):
                checker.load_adapter(paths[j])
                checker.prompt_cache.clear()
                got = checker.logprobs(proposal["prompt_tokens"], tokens)
                scores[j] = max(abs(a - b) for a, b in zip(got, stored, strict=True))
            if scores[i] > TOLERANCE:
                wrong += 1
            if scores[(i + 1) % len(agents)] <= TOLERANCE:
                indistinct += 1
    return checked, wrong, indistinct


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2, help="proposals per active user")
    parser.add_argument("--measure-before", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true", help="print, do not write JSON")
    args = parser.parse_args()
    if args.measure_before:
        measure_before(args.measure_before)
        return 0

    started = time.perf_counter()
    rss_before, series = before_figure(args.users)
    print(f"before: RSS with 1..3 private models {[round(x) for x in series]} MB", flush=True)

    from continual_lsp.config import Settings
    from continual_lsp.policy.model_host import shared_host

    shared_host(Settings())  # the process's one model, loaded before any user arrives
    rss_host = rss_mb()
    print(f"host loaded: RSS {rss_host:.0f} MB", flush=True)
    root = Path(tempfile.mkdtemp(prefix="team-bench-"))
    try:
        agents = make_users(root, args.users)
        host = agents[0].policy.host
        assert all(a.policy.host is host for a in agents), "agents must share one host"
        assert host is shared_host(agents[0].settings)
        made: list[list[str]] = [[] for _ in agents]
        first = [
            propose(a, SAMPLE_TASKS[i % len(SAMPLE_TASKS)], made[i]) for i, a in enumerate(agents)
        ]
        print(f"{args.users} users live; first proposals p50 {statistics.median(first):.2f} s")
        latency = {}
        for active in (1, 4, 8):
            if active > len(agents):
                continue
            times = concurrent_latency(agents, made, active, args.repeats + (active == 1) * 3)
            latency[active] = times
            print(
                f"{active} active: p50 {percentile(times, 50):.2f} s, "
                f"p90 {percentile(times, 90):.2f} s over {len(times)} proposals",
                flush=True,
            )
        rss = rss_mb()
        base_mb = (
            sum(
                p.numel() * p.element_size()
                for n, p in host.model.named_parameters()
                if "lora_" not in n
            )
            / MB
        )
        adapter_mb = sum(p.numel() * p.element_size() for n, p in host._lora_params()) / MB
        budget = base_mb + args.users * adapter_mb + 500
        checked, wrong, indistinct = check_adapters(agents, made)
        result = {
            "users": args.users,
            "rss_mb": round(rss, 1),
            "budget_mb": round(budget, 1),
            "rss_mb_before": round(rss_before, 1),
            "rss_mb_host_only": round(rss_host, 1),
            "wrong_adapter": wrong,
            "p50_s": {str(k): round(percentile(v, 50), 3) for k, v in latency.items()},
            "p90_s": {str(k): round(percentile(v, 90), 3) for k, v in latency.items()},
            "proposals_checked": checked,
            "indistinct": indistinct,
            "base_model_mb": round(base_mb, 1),
            "adapter_mb": round(adapter_mb, 2),
            "adapters_spilled": host.spills,
            "adapters_reloaded": host.reloads,
            "max_resident_adapters": host.max_resident,
            "mode": "in-process agents on one shared host (no sockets); training off",
            "seconds": round(time.perf_counter() - started, 1),
        }
        for agent in agents:
            agent.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(json.dumps(result, indent=1))
    print(
        f"RSS {result['rss_mb']:.0f} MB = {rss / budget:.2f} x budget ({budget:.0f} MB), "
        f"{rss / rss_before:.2f} x before ({rss_before:.0f} MB: one model per agent); "
        f"wrong adapter {wrong} of {checked} proposals (indistinct {indistinct}); "
        + ", ".join(
            f"p50 {k} users / 1 user {percentile(v, 50) / percentile(latency[1], 50):.1f} x"
            for k, v in latency.items()
            if k > 1
        )
    )
    if not args.no_write:
        RESULT.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
