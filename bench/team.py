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

Then training, on the shared team worker (`shared_training`: one spawned process, one
model, jobs taken in turn across users), with real SQLite stores and real SDPO steps on
one short correction (a task, the base model's greedy call, an edit of it: the
situation of tests/learning/conftest.py), so that steps are short and the figures count
steps, not context length:
- `storm`: step wait (enqueue → step done, the store's timestamps) of users B and C.
  Without a storm, A, B and C each send one correction at once (twice);
  `median_wait_s` is the median of those six waits. In the storm, A sends `--burst`
  corrections, and while the first of them trains, B and C send one each; `ratio` = the
  slower of B and C over the median (the issue's bound: 2). A first step, not counted,
  warms the worker.
- `restart`: `users` users each with one correction queued when the server went down
  (the first user's in the middle of its step, left `running`; the second user's held,
  its demonstration still being chosen). A restarted server's agents resume their
  training (`TrainingJobs.resume`), all on one team worker; `resumed` = jobs done after
  it, `in_owner_store` = those whose version is registered in its owner's store, its
  file in its owner's adapters directory with the registered checksum, and in no other
  store.
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


# -- training on the team worker -------------------------------------------------------------

STEP_TIMEOUT_S = 900.0


def correction_job() -> dict[str, Any]:
    """One short SDPO job: a task, the base model's greedy call, the reviewer's edit."""
    from continual_lsp.config import Settings
    from continual_lsp.learning.sdpo import SdpoJob
    from continual_lsp.policy.base import Message, SampleParams
    from continual_lsp.policy.local import LocalPolicy
    from continual_lsp.policy.model_host import shared_host
    from continual_lsp.policy.render import ChatMLRenderer
    from continual_lsp.tools.base import ToolCall

    policy = LocalPolicy(Settings(), host=shared_host(Settings()))
    prompt = ChatMLRenderer(
        policy.tokenizer, system_prompt="Reply with exactly one JSON tool call."
    ).render_prompt(
        [Message(role="user", content="In src/calc/ops.py line 3 returns a - b; fix it.")]
    )
    denied = policy.sample(prompt, SampleParams(temperature=0.0, max_tokens=60))
    fix = ToolCall(
        tool="edit_lines",
        arguments={"path": "src/calc/ops.py", "start": 3, "end": 3, "content": "    return a + b"},
    )
    return SdpoJob(
        proposal_id="bench-team",
        prompt_tokens=prompt,
        tokens=denied.tokens,
        logprobs=denied.logprobs,
        correction="Change only line 3, with edit_lines.",
        demonstration=fix.model_dump(),
        signal="edit",
    ).model_dump()


def trainee(root: Path, name: str) -> tuple[Any, Any]:
    """(settings, store) of a user whose training runs on the team worker."""
    from continual_lsp.config import Settings
    from continual_lsp.store import Store

    home = root / name
    home.mkdir(parents=True)
    settings = Settings(
        user=name,
        store_path=str(home / "store.sqlite3"),
        adapters_dir=str(home / "adapters"),
        shared_training=True,
    )
    return settings, Store(settings.store_file())


def waits(jobs: list[tuple[Any, int]]) -> list[float]:
    """Seconds from enqueue to step done of each (store, job id), once all are done."""
    deadline = time.monotonic() + STEP_TIMEOUT_S * len(jobs)
    out = []
    for store, job_id in jobs:
        while (job := store.job(job_id))["status"] not in ("done", "failed"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"training job {job_id} not done")
            time.sleep(0.1)
        if job["status"] == "failed":
            raise RuntimeError(f"training job {job_id} failed: {job['error']}")
        out.append(job["updated_at"] - job["created_at"])
    return out


def storm(root: Path, job: dict[str, Any], burst: int) -> dict[str, Any]:
    from continual_lsp.learning.team_worker import TeamTrainer

    users = [trainee(root, name) for name in ("a-storm", "b", "c")]
    team = TeamTrainer(users[0][0], poll_s=0.2)
    try:
        for settings, store in users:
            team.seat(settings, store.path).start()

        def send(counts: tuple[int, ...]) -> list[list[tuple[Any, int]]]:
            sent = [
                [(store, store.enqueue_job("sdpo", job)) for _ in range(n)]
                for n, (_, store) in zip(counts, users, strict=True)
            ]
            team.notify()
            return sent

        waits(send((1, 0, 0))[0])  # the worker's first step (loads, warms caches)
        calm: list[float] = []
        for _ in range(2):
            calm += waits([j for per_user in send((1, 1, 1)) for j in per_user])
        # The storm: A's burst is being trained when B and C each send one correction.
        burst_jobs = send((burst, 0, 0))[0]
        alice = users[0][1]
        while alice.job(burst_jobs[0][1])["status"] == "pending":
            time.sleep(0.05)
        sent = send((0, 1, 1))
        others = waits(sent[1] + sent[2])
        median = statistics.median(calm)
        return {
            "burst": burst,
            "median_wait_s": round(median, 2),
            "calm_waits_s": [round(w, 2) for w in calm],
            "other_user_wait_s": [round(w, 2) for w in others],
            "ratio": round(max(others) / median, 2),
            # Of the burst, steps done by the time B's and C's were: 1 or 2 when fair,
            # the whole burst if jobs were taken first come, first served.
            "burst_steps_before_others": sum(
                alice.job(j)["status"] == "done" for _, j in burst_jobs
            ),
        }
    finally:
        team.stop(timeout=1.0)  # the rest of the burst is not waited for
        for _, store in users:
            store.close()


def restart(root: Path, job: dict[str, Any], users: int) -> dict[str, Any]:
    from continual_lsp.agent.training_jobs import TrainingJobs
    from continual_lsp.learning.team_worker import team_trainer
    from continual_lsp.policy import training
    from continual_lsp.policy.adapter_registry import adapters_dir
    from continual_lsp.store import Store

    everyone = [trainee(root, f"user{i:02d}") for i in range(users)]
    queued = []
    for i, (_, store) in enumerate(everyone):
        queued.append(store.enqueue_job("sdpo", job, held=i == 1))
    assert everyone[0][1].claim_job() is not None  # the step the server died in
    for _, store in everyone:
        store.close()

    started = time.perf_counter()
    stores = [Store(settings.store_file()) for settings, _ in everyone]
    try:
        for (settings, _), store in zip(everyone, stores, strict=True):
            TrainingJobs(store, settings).resume()  # as each user's agent does on start
        waits(list(zip(stores, queued, strict=True)))
        seconds = time.perf_counter() - started
        resumed = in_owner = 0
        for (settings, _), store, job_id in zip(everyone, stores, queued, strict=True):
            done = store.job(job_id)
            resumed += done["status"] == "done"
            result = done["result"]
            mine = [a for a in store.adapters() if a["name"] == result["name"]]
            directory = adapters_dir(settings, store.path)
            elsewhere = sum(
                Path(a["path"]).parent == directory
                for other in stores
                if other is not store
                for a in other.adapters()
            )
            if (
                len(mine) == 1
                and Path(mine[0]["path"]).parent == directory
                and training.sha256_file(Path(mine[0]["path"]) / training.ADAPTER_FILE)
                == mine[0]["sha256"]
                and not elsewhere
            ):
                in_owner += 1
        return {
            "queued": len(queued),
            "resumed": resumed,
            "in_owner_store": in_owner,
            "seconds": round(seconds, 1),
        }
    finally:
        team_trainer(everyone[0][0]).stop(timeout=1.0)
        for store in stores:
            store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2, help="proposals per active user")
    parser.add_argument("--burst", type=int, default=8, help="corrections in the storm")
    parser.add_argument("--measure-before", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true", help="print, do not write JSON")
    args = parser.parse_args()
    if args.measure_before:
        measure_before(args.measure_before)
        return 0

    started = time.perf_counter()
    rss_before, series = before_figure(args.users)
    print(f"before: RSS with 1..3 private models {[round(x) for x in series]} MB", flush=True)

    import continual_lsp.agent.agent  # noqa: F401  (the libraries, before the model)
    from continual_lsp.config import Settings
    from continual_lsp.policy.model_host import shared_host

    rss_imports = rss_mb()
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
        cached = {
            t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
            for a in agents
            for _, layers, _ in a.policy.prompt_cache.entries
            for pair in layers
            for t in pair
        }
        resident = host.resident
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
            # Where rss_mb goes: libraries, then the model (with tokenizer and grammar),
            # then the users (their adapters, prompt K/V caches, agents and stores).
            "rss_breakdown_mb": {
                "libraries": round(rss_imports, 1),
                "model_tokenizer_grammar": round(rss_host - rss_imports, 1),
                "users": round(rss - rss_host, 1),
                "of_which_resident_adapters": round(resident * adapter_mb, 1),
                "of_which_prompt_caches": round(sum(cached.values()) / MB, 1),
            },
            "wrong_adapter": wrong,
            "p50_s": {str(k): round(percentile(v, 50), 3) for k, v in latency.items()},
            "p90_s": {str(k): round(percentile(v, 90), 3) for k, v in latency.items()},
            "proposals_checked": checked,
            "indistinct": indistinct,
            "base_model_mb": round(base_mb, 1),
            "adapter_mb": round(adapter_mb, 2),
            "adapters_spilled": host.spills,
            "adapters_reloaded": host.reloads,
            "adapter_swap_ms": round(1000 * host.swap_s / max(1, host.spills + host.reloads), 1),
            "max_resident_adapters": host.max_resident,
            "mode": "in-process agents on one shared host (no sockets); no training while they"
            " propose; storm and restart train on the shared team worker",
            "seconds": round(time.perf_counter() - started, 1),
        }
        for agent in agents:
            agent.close()
        job = correction_job()
        result["storm"] = storm(root / "storm", job, args.burst)
        print(f"storm: {result['storm']}", flush=True)
        result["restart"] = restart(root / "restart", job, args.users)
        print(f"restart: {result['restart']}", flush=True)
        result["seconds"] = round(time.perf_counter() - started, 1)
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
