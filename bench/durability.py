"""Bench: SIGKILL the decide → train → adapter-write cycle at random points, N times.

Each iteration starts a *cycle* process in its own process group. The cycle opens the
store through the real `Agent` (so its crash recovery runs), records a new decision
(a denial with a demonstration) on a proposal carrying real tokens of the embedded
model, enqueues its SDPO job through the agent's `TrainingJobs` (which spawns the
`TrainingWorker`), and waits for the queue to drain. The parent SIGKILLs the whole group
(cycle + worker) after a random delay, then checks, with nothing running:

- the store opens and SQLite's integrity check passes;
- every decision the cycle reported committed is in the store exactly once (one row,
  one `decision` event), and nothing else was decided;
- no proposal has more than one job; no job failed;
- every directory under the adapters dir is a complete version (adapter file + config)
  whose sha256 matches the store's record, or an unregistered but complete leftover
  of a crash between the save and its registration (the replay overwrites it), or a
  hidden `.partial-*` (removed at the next worker start);
- registered versions are numbered 1..n, each trained by a distinct job.

After the last kill a final cycle runs to completion: every job must end `done`, every
committed decision applied and trained exactly once. `--load` also loads each version
into a policy with its recorded sha256.

    python bench/durability.py [--iterations 50] [--max-delay 16] [--seed 0] [--dir D]

Prints one line per iteration (delay, phase reached, adapters, queue) and a summary.
`tests/learning/test_durability.py` runs the same loop for 3 iterations.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SAMPLE_WORKSPACE = REPO / "examples" / "sample-workspace"
SYSTEM = "Reply with exactly one JSON tool call."
TASK = "In src/calc/ops.py line 3 returns a - b; make it return a + b."
CORRECTION = "Do not rewrite the whole file; change only line 3 with edit_lines."
DEMO = {
    "tool": "edit_lines",
    "arguments": {"path": "src/calc/ops.py", "start": 3, "end": 3, "content": "    return a + b"},
}
MARKS = "marks.log"  # the cycle's progress, one line per phase (survives SIGKILL: page cache)


# -- setup (parent) ---------------------------------------------------------------------------


def situation(policy: Any) -> dict[str, Any]:
    """A proposal's tokens as the agent stores them: the rendered prompt, the model's own
    greedy call (what a reviewer denies; a hand-written call would be off-policy) and its
    sampling logprobs."""
    from continual_lsp.policy.base import Message, SampleParams
    from continual_lsp.policy.render import ChatMLRenderer

    prompt = ChatMLRenderer(policy.tokenizer, system_prompt=SYSTEM).render_prompt(
        [Message(role="user", content=TASK)]
    )
    sample = policy.sample(prompt, SampleParams(temperature=0.0, max_tokens=60))
    return {"prompt_tokens": prompt, "tokens": sample.tokens, "logprobs": sample.logprobs}


def prepare(root: Path, tokens: dict[str, Any]) -> None:
    """A fresh run folder: workspace, the proposal's tokens; the store is made by the cycle."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    shutil.copytree(SAMPLE_WORKSPACE, root / "ws")
    (root / "situation.json").write_text(json.dumps(tokens))


def settings_for(root: Path) -> Any:
    from continual_lsp.config import Settings

    return Settings(
        store_path=str(root / "store.sqlite3"),
        adapters_dir=str(root / "adapters"),
        enable_training=True,
        save_every=1,
        sandbox="none",
        allow_unsandboxed=True,
    )


# -- the cycle (child process) ----------------------------------------------------------------


def _mark(root: Path, *words: Any) -> None:
    with open(root / MARKS, "a", encoding="utf-8") as fh:
        fh.write(" ".join(str(w) for w in words) + "\n")
        fh.flush()


def cycle(root: Path, drain_timeout: float) -> int:
    """One decide → train → save cycle; runs until the queue is empty or it is killed."""
    from continual_lsp.agent.agent import Agent
    from continual_lsp.store import Store
    from continual_lsp.tools.base import ToolCall

    settings = settings_for(root)
    tokens = json.loads((root / "situation.json").read_text())
    _mark(root, "start", os.getpid())
    store = Store(settings.store_path or "")
    # The real startup path: Agent.__init__ runs crash recovery (re-enqueues a decision
    # committed before a crash whose job was never queued).
    agent = Agent(settings, root / "ws", store=store)
    _mark(root, "opened")
    task_id = store.create_task(TASK, str(root / "ws"))
    pid = store.add_proposal(
        task_id,
        0,
        "write",
        {"path": "src/calc/ops.py", "content": "def add(a, b):\n    return a + b\n"},
        tokens["prompt_tokens"],
        tokens["tokens"],
        tokens["logprobs"],
        None,
        agent.training.current_version_name(),
    )
    _mark(root, "intent", pid)
    store.record_decision(pid, "deny", correction=CORRECTION)
    _mark(root, "committed", pid)
    job = agent.training.enqueue(pid, "deny", CORRECTION, ToolCall.model_validate(DEMO))
    _mark(root, "enqueued", pid, job)
    store.mark_applied(pid, {"denied": True})
    _mark(root, "applied", pid)
    deadline = time.monotonic() + drain_timeout
    while store.queue_depth(("sdpo",)) > 0:
        if time.monotonic() > deadline:
            _mark(root, "timeout")
            return 3
        time.sleep(0.1)
    _mark(root, "drained")
    agent.close()
    return 0


# -- checks (parent, nothing running) ---------------------------------------------------------


@dataclass
class Marks:
    intents: list[str] = field(default_factory=list)
    committed: list[str] = field(default_factory=list)
    last: str = "none"


def read_marks(root: Path) -> Marks:
    marks = Marks()
    path = root / MARKS
    if not path.exists():
        return marks
    for line in path.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if not words:
            continue
        marks.last = words[0]
        if words[0] == "intent":
            marks.intents.append(words[1])
        elif words[0] == "committed":
            marks.committed.append(words[1])
    return marks


def check(root: Path, final: bool = False) -> dict[str, Any]:
    """The invariants of the module docstring; raises AssertionError naming the broken one."""
    from safetensors.torch import load as parse_safetensors

    from continual_lsp.policy import adapter_registry
    from continual_lsp.policy.local import adapter_files
    from continual_lsp.store import Store

    marks = read_marks(root)
    db = sqlite3.connect(root / "store.sqlite3")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok", "store is corrupt"
    finally:
        db.close()
    store = Store(root / "store.sqlite3")
    try:
        decided = {r["proposal_id"]: r for r in store._query("SELECT * FROM decisions")}
        events: dict[str, int] = {}
        for event in store.events(kind="decision"):
            events[event["proposal_id"]] = events.get(event["proposal_id"], 0) + 1
        for pid in marks.committed:
            assert pid in decided, f"committed decision {pid} is missing"
            assert events.get(pid) == 1, f"decision {pid} has {events.get(pid)} events"
        for pid in decided:
            assert pid in marks.intents, f"decision {pid} was never made by a cycle"
        jobs = store._query("SELECT id, status, payload, error, attempts FROM jobs ORDER BY id")
        per_proposal: dict[str, int] = {}
        for job in jobs:
            assert job["status"] != "failed", f"job {job['id']} failed: {job['error']}"
            proposal = json.loads(job["payload"])["proposal_id"]
            per_proposal[proposal] = per_proposal.get(proposal, 0) + 1
        duplicated = {p: n for p, n in per_proposal.items() if n > 1}
        assert not duplicated, f"proposals with more than one job: {duplicated}"
        for pid, row in decided.items():
            if row["applied"]:
                assert per_proposal.get(pid) == 1, f"applied decision {pid} has no job"

        adapters = store.adapters()
        assert [a["version"] for a in adapters] == list(range(1, len(adapters) + 1))
        job_ids = [a["metrics"].get("jobId") for a in adapters]
        assert len(job_ids) == len(set(job_ids)), f"a job trained twice: {job_ids}"
        registered = {a["name"]: a for a in adapters}
        directory = root / "adapters"
        orphans, partials = [], []
        for child in sorted(directory.iterdir()) if directory.exists() else []:
            if child.name.startswith(adapter_files.PARTIAL_PREFIX):
                partials.append(child.name)
                continue
            file = child / adapter_registry.ADAPTER_FILE
            assert file.is_file() and (child / adapter_registry.CONFIG_FILE).is_file(), (
                f"{child.name} is an incomplete adapter version: {sorted(os.listdir(child))}"
            )
            data = file.read_bytes()
            assert parse_safetensors(data), f"{child.name} holds no tensors"
            if child.name in registered:
                expected = registered[child.name]["sha256"]
                actual = hashlib.sha256(data).hexdigest()
                assert actual == expected, f"{child.name}: sha256 {actual} != store {expected}"
            else:
                orphans.append(child.name)
        for name, adapter in registered.items():
            assert Path(adapter["path"]).is_dir(), f"registered {name} is missing on disk"
        if final:
            assert not orphans, f"unregistered versions after the final cycle: {orphans}"
            assert all(j["status"] == "done" for j in jobs), [dict(j) for j in jobs]
            assert all(row["applied"] for row in decided.values())
            assert set(per_proposal) == set(decided), "a decision without a job"
            trained = {
                json.loads(j["payload"])["proposal_id"]
                for j in jobs
                if (store.job(j["id"])["result"] or {}).get("skipped") is None
            }
            by_job = {a["metrics"].get("proposalId") for a in adapters}
            assert trained <= by_job, f"trained jobs without a version: {trained - by_job}"
        return {
            "decisions": len(decided),
            "jobs": len(jobs),
            "done": sum(j["status"] == "done" for j in jobs),
            "attempts": max((j["attempts"] for j in jobs), default=0),
            "adapters": len(adapters),
            "orphans": orphans,
            "partials": partials,
            "phase": marks.last,
        }
    finally:
        store.close()


def load_all(root: Path, policy: Any) -> int:
    """Load every registered version with its recorded sha256 (the worker's own check)."""
    from continual_lsp.policy.local import adapter_files
    from continual_lsp.store import Store

    store = Store(root / "store.sqlite3")
    try:
        for adapter in store.adapters():
            adapter_files.load_adapter(policy, adapter["path"], adapter["sha256"])
        return len(store.adapters())
    finally:
        store.close()


# -- the loop (parent) ------------------------------------------------------------------------


def _group_alive(pgid: int) -> bool:
    """A non-zombie process is still in the group (the worker dies by PDEATHSIG too)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def start_cycle(root: Path, log: Path, drain_timeout: float = 600.0) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, __file__, "cycle", "--dir", str(root), "--drain", str(drain_timeout)],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: one killpg takes the worker too
        )


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    deadline = time.monotonic() + 30
    while _group_alive(proc.pid):
        assert time.monotonic() < deadline, "a process of the killed group survived"
        time.sleep(0.05)


def run(
    root: Path,
    iterations: int,
    max_delay: float,
    seed: int,
    *,
    min_delay: float = 0.3,
    echo: bool = True,
) -> list[dict[str, Any]]:
    """`iterations` killed cycles then one that completes; the checks after each."""
    rng = random.Random(seed)
    log = root / "cycles.log"
    rows = []
    for i in range(iterations):
        delay = rng.uniform(min_delay, max_delay)
        _mark(root, "launch", i)  # the phase reads "launch" if killed before the cycle's first mark
        proc = start_cycle(root, log)
        started = time.monotonic()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(delay)  # a cycle that ends first is fine: it is killed all the same
        finished = proc.returncode
        kill_group(proc)
        row = {"iteration": i, "delay": round(delay, 2), "exited": finished, **check(root)}
        row["seconds"] = round(time.monotonic() - started, 1)
        rows.append(row)
        if echo:
            print(json.dumps(row), flush=True)
    proc = start_cycle(root, log)
    try:
        code = proc.wait(900)
    finally:
        kill_group(proc)
    assert code == 0, f"the final cycle exited {code}; see {log}"
    final = {"iteration": "final", **check(root, final=True)}
    rows.append(final)
    if echo:
        print(json.dumps(final), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    child = sub.add_parser("cycle", help="(internal) one cycle, killed by the parent")
    child.add_argument("--dir", required=True)
    child.add_argument("--drain", type=float, default=600.0)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--max-delay", type=float, default=16.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", default=None, help="run folder (default: a temp dir)")
    parser.add_argument("--load", action="store_true", help="load every version at the end")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if args.command == "cycle":
        raise SystemExit(cycle(Path(args.dir), args.drain))

    import tempfile

    from continual_lsp.policy.local.local_policy import LocalPolicy

    root = Path(args.dir or tempfile.mkdtemp(prefix="durability-"))
    policy = LocalPolicy(settings_for(root))
    prepare(root, situation(policy))
    start = time.monotonic()
    rows = run(root, args.iterations, args.max_delay, args.seed)
    loaded = load_all(root, policy) if args.load else None
    killed = rows[:-1]
    phases: dict[str, int] = {}
    for row in killed:
        phases[row["phase"]] = phases.get(row["phase"], 0) + 1
    summary = {
        "iterations": len(killed),
        "seconds": round(time.monotonic() - start, 1),
        "killed_in_phase": phases,
        "orphans_seen": sum(bool(r["orphans"]) for r in killed),
        "partials_seen": sum(bool(r["partials"]) for r in killed),
        "max_attempts": rows[-1]["attempts"],
        "adapters": rows[-1]["adapters"],
        "jobs": rows[-1]["jobs"],
        "loaded": loaded,
        "dir": str(root),
    }
    print(json.dumps({"summary": summary}), flush=True)


if __name__ == "__main__":
    main()
