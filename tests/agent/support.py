"""Helpers shared by the agent tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from continual_lsp.agent.agent import Agent
from continual_lsp.config import Settings


def make_agent(tmp_path: Path, workspace: Path, policy: Any, **overrides: Any) -> Agent:
    """An Agent on `workspace` with its own store, training off."""
    settings = Settings(
        enable_training=False, store_path=str(tmp_path / "store.sqlite3"), **overrides
    )
    return Agent(settings, workspace, policy=policy)


def record_jobs(agent: Agent, monkeypatch: Any) -> list[dict[str, Any]]:
    """What the agent queues for training (training itself is off): one dict per job,
    completed as the agent releases it."""
    jobs: list[dict[str, Any]] = []

    def enqueue(
        pid: str,
        signal: str,
        correction: Any,
        demo: Any,
        examples: Any = None,
        held: bool = False,
    ) -> int:
        jobs.append(
            {"proposal": pid, "signal": signal, "demo": demo, "examples": examples, "held": held}
        )
        return len(jobs)

    def release(job_id: int | None, demo: Any, examples: Any, cluster: Any = None) -> None:
        assert job_id is not None and jobs[job_id - 1]["held"], "released a job not held"
        jobs[job_id - 1].update(demo=demo, examples=examples, cluster=cluster, held=False)

    monkeypatch.setattr(agent.training, "enqueue", enqueue)
    monkeypatch.setattr(agent.training, "release", release)
    # Nothing trains these jobs: waiting for one would start a worker for nothing.
    monkeypatch.setattr(agent.training, "wait", lambda *args: None)
    return jobs
