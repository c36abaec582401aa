"""A team server's load on one machine (issue 20): 20 users over TCP, one base model.

    nice -n 5 python bench/team.py [--users 20] [--repeats 2]

What runs: one server process, `continual-lsp serve --tcp` (the CLI a team runs, a TOML
config and a tokens file mapping one token to each user), and `users` LSP clients in
this process (tests/server/harness.py's `Editor`), each a TCP connection of its own from
its own loopback address (127.0.0.2, .3, …: as developers' machines, so the server's
per-address connection limit is not what is measured). Each user has its own workspace,
store and adapters directory, as the server derives them from its config (`user_settings`),
and an adapter of its own: LoRA B matrices set to seeded noise, saved as version v0001
and registered in that user's store before the server starts, so the server serves it
as after a restart; as the training worker does after it saves a version, the prompt
start's K/V under it is kept on disk (`keep_prompt_prefix`), where the server reads it.
Autonomy is `manual`, so one `continual/startTask` is one proposal.

Measured, with training off (the issue's budget is the sampling side: training runs in
a worker with a model of its own, measured below under `restart`):
- `rss_mb`: the server's resident memory (VmRSS) plus that of every process under it
  (training workers), the highest of samples every 0.25 s while the users connect,
  propose once each and run the latency rounds. `rss_mb_end`: the same after them.
- `budget_mb`: one base model + `users` adapters + 500 MB (the issue's bound), the model
  and adapter sizes counted from their tensors.
- `rss_mb_before`: one model per agent, the way it was: a child process builds 1, 2, 3
  private `LocalPolicy`s (each loads the model, as every Agent did) and reads its RSS
  after each; extrapolated linearly to `users` (rss(1) + (users - 1) × the mean step).
- `wrong_adapter`: proposals whose sampling log-probs (as the server stored them in the
  user's store) do not match their own user's adapter, re-scored in this process by an
  independent model copy with that user's version file loaded (|Δ| ≤ 1e-3 per token);
  the same check under the next user's adapter must fail, else the check had no power
  (`indistinct`). `adapter_version_shown`: proposals whose notification names the
  user's own version.
- `p50_s` / `p90_s`: client wall time of `continual/startTask` (request, prompt,
  constrained decode, preview, answer) with 1, 4 and 8 users asking at once;
  `p50_ratio_8_to_1` the 8-user p50 over the 1-user p50 (issue 34's bound: 2.5; the
  server decodes users in flight as one batch, `batched`).
- `cold_start_s`: a new server process (the load's, restarted); as soon as it listens,
  the first user connects and starts a task: seconds from `initialize` to the proposal
  (issue 34's bound: 3 s). The model loads at the server's start, not at the connect:
  `model_ready_s` (from the process's start) and its parts (`model_ready_parts_s`:
  imports, dtype, weights, adapter_and_grammar) come from the server's log line.

Then training on the shared team worker (`shared_training`, on by default over TCP: one
spawned process, one model, jobs taken in turn across users) with real SQLite stores and
real SDPO steps on one short correction (a task, the base model's greedy call, an edit
of it: the situation of tests/learning/conftest.py), so that steps are short:
- `storm` (in this process, on a `TeamTrainer` of its own: the timing of a burst against
  single jobs needs jobs queued at chosen moments): step wait (enqueue → step done, the
  store's timestamps) of users B and C. Without a storm, A, B and C each send one
  correction at once (twice); `median_wait_s` is the median of those six waits. In the
  storm, A sends `--burst` corrections, and while the first of them trains, B and C
  send one each; `ratio` = the slower of B and C over the median (the issue's bound: 2).
  A first step, not counted, warms the worker.
- `restart` (over TCP): the load's server is stopped; while it is down every user has
  one correction queued in their store (the first user's in the middle of its step,
  left `running`; the second user's held, its demonstration still being chosen). A new
  server with training on starts and the users connect again; each connection's agent
  resumes its user's training (`TrainingJobs.resume`), all on the server's one team
  worker. `resumed` = jobs done, `in_owner_store` = those whose version is registered in
  its owner's store, its file in its owner's adapters directory with the registered
  checksum, and in no other store; `status_shows_it` = users whose `continual/status`
  names that version; `rss_mb_peak` = the server and its team worker together.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
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


def rss_of(pid: int) -> float:
    """VmRSS of `pid` in MB (0 once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0  # a zombie has no VmRSS


def rss_mb() -> float:
    return rss_of(os.getpid())


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (its training workers and their helpers), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def tree_rss(pid: int) -> float:
    """RSS of `pid` plus every process under it, in MB."""
    return rss_of(pid) + sum(rss_of(child) for child in descendants(pid))


class PeakRss:
    """Samples `tree_rss(pid)` every `interval` s on a thread while in a `with` block."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid, self.interval = pid, interval
        self.peak = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.wait(self.interval):
            self.peak = max(self.peak, tree_rss(self.pid))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, tree_rss(self.pid))


def measure_before(count: int) -> None:
    """Child process: `count` private policies, one model each; prints RSS after each."""
    from continual_lsp.config import Settings
    from continual_lsp.policy.local.local_policy import LocalPolicy

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


# -- the server and its users ----------------------------------------------------------------


class User:
    """One developer: a token, a workspace, and the store and adapters directory the
    server derives for them (server/main.py `user_settings`: `users/<user>/` beside the
    configured store, `<user>/` in the adapters directory; the bench may not import the
    server, and a mismatch would show as proposals missing from these stores)."""

    def __init__(self, root: Path, index: int, server_settings: Any) -> None:
        self.index = index
        self.name = f"user{index:02d}"
        self.token = f"team-bench-token-{index:02d}"
        self.address = f"127.0.0.{2 + index}"  # one machine per developer
        store = Path(server_settings.store_path)
        self.settings = server_settings.model_copy(
            update={
                "user": self.name,
                "store_path": str(store.parent / "users" / self.name / store.name),
                "adapters_dir": str(Path(server_settings.adapters_dir) / self.name),
            }
        )
        self.workspace = root / "users" / self.name / "ws"
        self.made: list[str] = []  # proposal ids
        self.shown: list[str | None] = []  # the adapter each proposal's notification named

    @property
    def store_path(self) -> Path:
        return self.settings.store_file()


class TeamServer:
    """`continual-lsp serve --tcp` in a process of its own; stderr goes to `log`."""

    def __init__(self, root: Path, users: list[User], *, training: bool) -> None:
        self.config = root / f"team-{'training' if training else 'load'}.toml"
        self.config.write_text(server_toml(root, training))
        self.tokens = root / "tokens.json"
        self.tokens.write_text(json.dumps({u.token: u.name for u in users}))
        self.log = root / f"server-{'training' if training else 'load'}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self, timeout: float = 300.0) -> None:
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "continual_lsp",
                    "serve",
                    "--config",
                    str(self.config),
                    "--tcp",
                    "127.0.0.1:0",
                    "--token-file",
                    str(self.tokens),
                ],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + timeout
        while not (found := re.search(r"listening on [\d.]+:(\d+)", self.log.read_text())):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start:\n{self.log.read_text()}")
            time.sleep(0.2)
        self.port = int(found.group(1))

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self) -> None:
        """SIGTERM, as a deployment stops it; its workers are waited for too (they watch
        their parent and exit with it), and killed by their ids if they linger."""
        if self.process is None:
            return
        workers = descendants(self.process.pid)
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        deadline = time.monotonic() + 30
        for pid in workers:
            while rss_of(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if rss_of(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.process = None


def server_toml(root: Path, training: bool) -> str:
    """The server's config: every user's store under `root/users`, adapters under
    `root/adapters`, proposals one at a time (manual), no OS sandbox in a bench."""
    values = {
        "store_path": str(root / "store.sqlite3"),
        "adapters_dir": str(root / "adapters"),
        "workspace_roots": [str(root / "users")],
        "autonomy": "manual",
        "sandbox": "none",
        "allow_unsandboxed": True,
        "enable_training": training,
    }
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())


def server_settings(root: Path) -> Any:
    from continual_lsp.config import Settings

    config = root / "team-load.toml"
    config.write_text(server_toml(root, training=False))
    return Settings.load(config)


def make_users(root: Path, count: int, checker: Any) -> list[User]:
    """`count` users, each with a workspace and adapter v0001 of its own in its store,
    saved as the training worker saves a version (its prompt start kept on disk)."""
    import torch

    from continual_lsp.policy.adapter_registry import adapters_dir, version_name
    from continual_lsp.policy.local import adapter_files
    from continual_lsp.store import Store

    base = server_settings(root)
    users = []
    for i in range(count):
        user = User(root, i, base)
        shutil.copytree(WORKSPACE, user.workspace)
        generator = torch.Generator().manual_seed(1000 + i)
        with checker.exclusive(), torch.no_grad():
            for param_name, param in checker.model.named_parameters():
                if "lora_B" in param_name:
                    param.copy_(0.02 * torch.randn(param.shape, generator=generator))
        store_path = user.store_path
        store_path.parent.mkdir(parents=True, exist_ok=True)
        directory = adapters_dir(user.settings, store_path)
        info = adapter_files.save_adapter(checker, version_name(1), directory)
        # What the training worker does after it saves a version (learning/worker.py
        # `keep_prompt_prefix`): the prompt start's K/V under it, kept on disk.
        checker.keep_prompt_prefix()
        store = Store(store_path)
        store.add_adapter(info.name, info.path, info.sha256, None, {"bench": "team"})
        store.close()
        users.append(user)
    return users


async def connect(user: User, port: int) -> Any:
    """An `Editor` on `user`'s workspace, connected from `user.address` and initialized
    with their token (pygls' `start_tcp`, with a source address)."""
    import asyncio
    import logging

    from pygls.client import run_async

    from tests.server.harness import Editor

    editor = Editor(user.workspace, understands_proposals=True)
    client = editor.client
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(user.address, 0))
    client.protocol.set_writer(writer)
    client._async_tasks.append(
        asyncio.create_task(
            run_async(
                stop_event=client._stop_event,
                reader=reader,
                protocol=client.protocol,
                logger=logging.getLogger("pygls.client"),
                error_handler=client.report_server_error,
            )
        )
    )
    await editor.initialize(token=user.token)
    return editor


async def propose(editor: Any, user: User, task: str) -> float:
    """Seconds to `user`'s proposal for `task`, asked over their connection."""
    start = time.perf_counter()
    result = await editor.request("continual/startTask", {"text": task}, timeout=900)
    seconds = time.perf_counter() - start
    proposal = result.get("proposal")
    if proposal is not None:
        user.made.append(proposal["proposalId"])
        user.shown.append(proposal.get("adapterVersion"))
    return seconds


async def load(
    users: list[User], port: int, repeats: int
) -> tuple[list[float], dict[int, list[float]]]:
    """Everyone connects and proposes once; then rounds of 1, 4 and 8 users at once."""
    import asyncio

    editors = await asyncio.gather(*(connect(u, port) for u in users))
    try:
        first = await asyncio.gather(
            *(
                propose(e, u, SAMPLE_TASKS[u.index % len(SAMPLE_TASKS)])
                for e, u in zip(editors, users, strict=True)
            )
        )
        print(f"{len(users)} users live; first proposals p50 {statistics.median(first):.2f} s")
        latency: dict[int, list[float]] = {}
        for active in (1, 4, 8):
            if active > len(users):
                continue
            rounds = repeats + (active == 1) * 3

            async def run(k: int, rounds: int = rounds) -> list[float]:
                user = users[k]
                return [
                    await propose(editors[k], user, SAMPLE_TASKS[(k + r) % len(SAMPLE_TASKS)])
                    for r in range(rounds)
                ]

            per_user = await asyncio.gather(*(run(k) for k in range(active)))
            latency[active] = [t for times in per_user for t in times]
            print(
                f"{active} active: p50 {percentile(latency[active], 50):.2f} s, "
                f"p90 {percentile(latency[active], 90):.2f} s over {len(latency[active])}",
                flush=True,
            )
        return list(first), latency
    finally:
        await asyncio.gather(*(e.stop(quiet=True) for e in editors))


async def cold_start(user: User, port: int) -> tuple[float, float]:
    """(seconds from `initialize` to the first proposal, of which `initialize` itself)
    for one user on a server that has just started."""
    started = time.perf_counter()
    editor = await connect(user, port)
    initialized = time.perf_counter() - started
    try:
        await propose(editor, user, SAMPLE_TASKS[0])
        return time.perf_counter() - started, initialized
    finally:
        await editor.stop(quiet=True)


def fresh_server_start(root: Path, users: list[User]) -> dict[str, Any]:
    """A new server process; as soon as it listens, one user connects and proposes."""
    import asyncio

    server = TeamServer(root, users, training=False)
    started = time.perf_counter()
    level = os.environ.get("CONTINUAL_LSP_LOG")
    os.environ["CONTINUAL_LSP_LOG"] = "INFO"  # the server's "model ready" line, by part
    try:
        server.start()
    finally:
        if level is None:
            del os.environ["CONTINUAL_LSP_LOG"]
        else:
            os.environ["CONTINUAL_LSP_LOG"] = level
    listening = time.perf_counter() - started
    try:
        seconds, initialize = asyncio.run(cold_start(users[0], server.port))
    finally:
        server.stop()
    ready = re.search(r"model ready in ([\d.]+) s \((\w+)\): (.*)", server.log.read_text())
    parts = {} if ready is None else {
        name: float(value) for name, value in re.findall(r"(\w+) ([\d.]+) s", ready.group(3))
    }  # fmt: skip
    return {
        "cold_start_s": round(seconds, 2),
        "initialize_s": round(initialize, 2),
        "process_to_listening_s": round(listening, 2),
        # the model's load in the server, from its start (it overlaps the listening)
        "model_ready_s": float(ready.group(1)) if ready else None,
        "model_ready_parts_s": parts,
        "sample_dtype": ready.group(2) if ready else None,
    }


def check_adapters(users: list[User], checker: Any) -> tuple[int, int, int]:
    """(checked, wrong_adapter, indistinct) over every proposal the users got."""
    from continual_lsp.store import Store

    checked = wrong = indistinct = 0
    stores = [Store(u.store_path) for u in users]
    try:
        paths = [s.current_adapter()["path"] for s in stores]
        for i, user in enumerate(users):
            for proposal_id in user.made:
                proposal = stores[i].proposal(proposal_id)
                if proposal is None:
                    raise RuntimeError(f"{proposal_id} is not in {user.name}'s store")
                tokens, stored = proposal["tokens"], proposal["logprobs"]
                if not tokens:
                    continue
                checked += 1
                scores = {}
                for j in (i, (i + 1) % len(users)):
                    checker.load_adapter(paths[j])
                    checker.prompt_cache.clear()
                    got = checker.logprobs(proposal["prompt_tokens"], tokens)
                    scores[j] = max(abs(a - b) for a, b in zip(got, stored, strict=True))
                if scores[i] > TOLERANCE:
                    wrong += 1
                if scores[(i + 1) % len(users)] <= TOLERANCE:
                    indistinct += 1
    finally:
        for store in stores:
            store.close()
    return checked, wrong, indistinct


# -- training on the team worker -------------------------------------------------------------

STEP_TIMEOUT_S = 900.0


def correction_job(policy: Any) -> dict[str, Any]:
    """One short SDPO job: a task, `policy`'s greedy call, the reviewer's edit."""
    from continual_lsp.learning.sdpo import SdpoJob
    from continual_lsp.policy.base import Message, SampleParams
    from continual_lsp.policy.render import ChatMLRenderer
    from continual_lsp.tools.base import ToolCall

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


async def reconnect_and_wait(
    users: list[User], port: int, stores: list[Any], queued: list[int]
) -> tuple[float, list[str | None]]:
    """The users connect again (their agents resume their jobs); seconds until every job
    is done, then what each user's `continual/status` names as their adapter."""
    import asyncio

    started = time.perf_counter()
    editors = await asyncio.gather(*(connect(u, port) for u in users))
    try:
        deadline = time.monotonic() + STEP_TIMEOUT_S * len(users)
        while not all(
            s.job(j)["status"] in ("done", "failed") for s, j in zip(stores, queued, strict=True)
        ):
            if time.monotonic() > deadline:
                raise TimeoutError("the queued jobs did not all finish")
            await asyncio.sleep(0.5)
        seconds = time.perf_counter() - started
        statuses = await asyncio.gather(*(e.request("continual/status", {}) for e in editors))
        return seconds, [s.get("adapterVersion") for s in statuses]
    finally:
        await asyncio.gather(*(e.stop(quiet=True) for e in editors))


def restart(root: Path, users: list[User], job: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    from continual_lsp.agent.training_jobs import adapter_item_id
    from continual_lsp.policy import adapter_registry
    from continual_lsp.policy.adapter_registry import adapters_dir
    from continual_lsp.store import Store

    # The server is down: each user's correction is queued (the first one mid-step).
    stores = [Store(u.store_path) for u in users]
    queued = [store.enqueue_job("sdpo", job, held=i == 1) for i, store in enumerate(stores)]
    assert stores[0].claim_job() is not None  # the step the server died in
    for store in stores:
        store.close()

    server = TeamServer(root, users, training=True)
    server.start()
    stores = [Store(u.store_path) for u in users]
    try:
        with PeakRss(server.pid) as peak:
            seconds, shown = asyncio.run(reconnect_and_wait(users, server.port, stores, queued))
            processes = 1 + len(descendants(server.pid))
        resumed = in_owner = status_shows = 0
        for user, store, job_id, version_shown in zip(users, stores, queued, shown, strict=True):
            done = store.job(job_id)
            if done["status"] != "done":
                continue
            resumed += 1
            mine = [a for a in store.adapters() if a["name"] == done["result"]["name"]]
            directory = adapters_dir(user.settings, store.path)
            elsewhere = sum(
                Path(a["path"]).parent == directory
                for other in stores
                if other is not store
                for a in other.adapters()
            )
            if (
                len(mine) == 1
                and Path(mine[0]["path"]).parent == directory
                and adapter_registry.sha256_file(
                    Path(mine[0]["path"]) / adapter_registry.ADAPTER_FILE
                )
                == mine[0]["sha256"]
                and not elsewhere
            ):
                in_owner += 1
                status_shows += version_shown == adapter_item_id(mine[0]["version"])
        return {
            "queued": len(queued),
            "resumed": resumed,
            "in_owner_store": in_owner,
            "status_shows_it": status_shows,
            "seconds": round(seconds, 1),
            "rss_mb_peak": round(peak.peak, 1),
            "processes": processes,
            "mode": "over TCP: a new server process, users reconnecting, one team worker",
        }
    finally:
        server.stop()
        for store in stores:
            store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2, help="proposals per active user")
    parser.add_argument("--burst", type=int, default=8, help="corrections in the storm")
    parser.add_argument("--measure-before", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true", help="print, do not write JSON")
    parser.add_argument(
        "--no-training",
        action="store_true",
        help="skip the storm and the restart (training); their previous results are kept",
    )
    args = parser.parse_args()
    if args.measure_before:
        measure_before(args.measure_before)
        return 0
    import asyncio

    from continual_lsp.config import Settings
    from continual_lsp.policy.local.local_policy import LocalPolicy
    from continual_lsp.policy.model_files import cpu_model

    started = time.perf_counter()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores", flush=True)
    rss_before, series = before_figure(args.users)
    print(f"before: RSS with 1..3 private models {[round(x) for x in series]} MB", flush=True)
    # This process's own model copy: it makes the users' adapters and re-scores their
    # proposals; it is not the server's.
    checker = LocalPolicy(Settings())
    model = checker.host.model
    base_mb = (
        sum(p.numel() * p.element_size() for n, p in model.named_parameters() if "lora_" not in n)
        / MB
    )
    adapter_mb = sum(p.numel() * p.element_size() for _, p in checker.host._lora_params()) / MB
    budget = base_mb + args.users * adapter_mb + 500
    root = Path(tempfile.mkdtemp(prefix="team-bench-"))
    server: TeamServer | None = None
    try:
        users = make_users(root, args.users, checker)
        server = TeamServer(root, users, training=False)
        server.start()
        rss_idle = tree_rss(server.pid)
        print(f"server up (pid {server.pid}): RSS {rss_idle:.0f} MB before any user", flush=True)
        with PeakRss(server.pid) as peak:
            first, latency = asyncio.run(load(users, server.port, args.repeats))
            rss_end = tree_rss(server.pid)
            processes = 1 + len(descendants(server.pid))
        server.stop()
        server = None
        cold = fresh_server_start(root, users)
        print(f"fresh server: {cold}", flush=True)
        checked, wrong, indistinct = check_adapters(users, checker)
        result: dict[str, Any] = {
            "users": args.users,
            "rss_mb": round(peak.peak, 1),
            "budget_mb": round(budget, 1),
            "rss_mb_before": round(rss_before, 1),
            "margin_mb": round(budget - peak.peak, 1),
            "rss_mb_end": round(rss_end, 1),
            "rss_mb_idle": round(rss_idle, 1),
            "server_processes": processes,
            "wrong_adapter": wrong,
            "p50_s": {str(k): round(percentile(v, 50), 3) for k, v in latency.items()},
            "p90_s": {str(k): round(percentile(v, 90), 3) for k, v in latency.items()},
            "first_proposal_p50_s": round(statistics.median(first), 3),
            # Decode steps of every user in flight run as one batch (issue 34).
            "batched": True,
            "p50_ratio_8_to_1": round(percentile(latency[8], 50) / percentile(latency[1], 50), 2)
            if 8 in latency
            else None,
            **cold,
            "cpu": cpu_model(),
            "proposals_checked": checked,
            "indistinct": indistinct,
            "adapter_version_shown": sum(v == "adapter-1" for u in users for v in u.shown),
            "proposals": sum(len(u.made) for u in users),
            "base_model_mb": round(base_mb, 1),
            "adapter_mb": round(adapter_mb, 2),
            "max_resident_adapters": users[0].settings.max_resident_adapters,
            "max_prompt_caches": users[0].settings.max_prompt_caches,
            "max_prompt_cache_mb": users[0].settings.max_prompt_cache_mb,
            # glibc's arenas per thread: the server's agent threads each get one unless
            # this caps them (docs/deploy.md); the server inherits this environment.
            "malloc_arena_max": os.environ.get("MALLOC_ARENA_MAX"),
            "mode": "one `continual-lsp serve --tcp` process, each user an LSP client on a"
            " TCP connection of its own; training off while they propose; the storm on an"
            " in-process team worker, the restart over TCP",
        }
        print(f"load: {json.dumps(result)}", flush=True)
        if args.no_training and RESULT.is_file():
            previous = json.loads(RESULT.read_text())
            for part in ("storm", "restart"):
                if part in previous:
                    result[part] = {**previous[part], "kept_from_previous_run": True}
        else:
            checker.load_adapter("")  # the base model's greedy call is the job's sample
            job = correction_job(checker)
            result["storm"] = storm(root / "storm", job, args.burst)
            print(f"storm: {result['storm']}", flush=True)
            result["restart"] = restart(root, users, job)
            print(f"restart: {result['restart']}", flush=True)
        result["seconds"] = round(time.perf_counter() - started, 1)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)

    print(json.dumps(result, indent=1))
    print(
        f"RSS {result['rss_mb']:.0f} MB = {result['rss_mb'] / budget:.2f} x budget "
        f"({budget:.0f} MB, margin {result['margin_mb']:.0f} MB), "
        f"{result['rss_mb'] / rss_before:.2f} x before ({rss_before:.0f} MB: one model per "
        f"agent); wrong adapter {wrong} of {checked} proposals (indistinct {indistinct}); "
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
