"""The agent pool's user limit: a user past it is refused at initialize, with a reason."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from continual_lsp.config import Settings
from server.agents import AgentPool
from server.errors import RequestFailed


class _Sink:
    def post(self, kind: str, payload: Any) -> None:
        pass


def _pool(max_users: int, opened: list[str]) -> AgentPool:
    def factory(settings: Settings, workspace: Path, listener: Any) -> Any:
        opened.append(settings.user)
        return object()

    return AgentPool(factory, ThreadPoolExecutor(1), max_users=max_users)


def test_a_user_past_the_limit_is_refused_until_someone_leaves(tmp_path: Path) -> None:
    opened: list[str] = []
    pool = _pool(2, opened)
    sink = _Sink()
    alice = pool.acquire(Settings(user="alice"), tmp_path, sink)
    pool.acquire(Settings(user="bob"), tmp_path, sink)
    # alice's second editor (another workspace) is still alice: not a new user.
    alice_other = pool.acquire(Settings(user="alice"), tmp_path / "other", sink)
    with pytest.raises(RequestFailed, match=r"serving 2 users.*max_users = 2.*'carol'"):
        pool.acquire(Settings(user="carol"), tmp_path, sink)
    alice.created.result(timeout=5)
    assert "carol" not in opened  # nothing of carol's was opened
    pool.release(alice, sink)
    assert pool.connected_users() == {"alice", "bob"}  # her other editor is still open
    pool.release(alice_other, sink)
    assert pool.connected_users() == {"bob"}
    pool.acquire(Settings(user="carol"), tmp_path, sink).created.result(timeout=5)
    assert pool.connected_users() == {"bob", "carol"}
    assert "carol" in opened


def test_the_model_is_preloaded_and_each_user_prompt_warmed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh server loads the shared model at start (not at the first connect), and a
    connecting user's prompt cache is filled once their agent is ready."""
    from continual_lsp.policy import model_files
    from continual_lsp.policy.local import model_host

    loaded: list[str] = []
    monkeypatch.setattr(model_host, "shared_host", lambda s, dtype: loaded.append(dtype))
    monkeypatch.setattr(model_files, "resolve_dtype", lambda choice, device: "float32")
    warmed: list[str] = []

    class _Policy:
        def warm_prompt(self) -> int:
            warmed.append("alice")
            return 250

    class _Agent:
        policy = _Policy()

    pool = AgentPool(lambda s, w, listener: _Agent(), ThreadPoolExecutor(1))
    pool.preload(Settings()).result(timeout=5)
    assert loaded == ["float32"]
    pool.preload(Settings(backend="tinker")).result(timeout=5)
    assert loaded == ["float32"]  # only the local backend has a model to load here
    handle = pool.acquire(Settings(user="alice"), tmp_path, _Sink())
    handle.ready.result(timeout=5)
    pool._executor.submit(lambda: None).result(timeout=5)  # the warm-up ran after ready
    assert warmed == ["alice"]


def test_no_agent_is_built_while_the_model_preloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent built beside the preload imported transformers on a second thread, and
    the preload failed: a user who connects at once gets their agent after it, and no
    executor thread waits for it meanwhile (two threads: the preload's and one free)."""
    from continual_lsp.policy import model_files
    from continual_lsp.policy.local import model_host

    release = threading.Event()
    events: list[str] = []

    def slow_load(settings: Settings, dtype: str) -> None:
        release.wait(timeout=5)
        events.append("preloaded")

    monkeypatch.setattr(model_host, "shared_host", slow_load)
    monkeypatch.setattr(model_files, "resolve_dtype", lambda choice, device: "float32")

    def factory(settings: Settings, workspace: Path, listener: Any) -> Any:
        events.append("agent")
        return object()

    executor = ThreadPoolExecutor(2)
    pool = AgentPool(factory, executor)
    preloaded = pool.preload(Settings())
    handle = pool.acquire(Settings(user="alice"), tmp_path, _Sink())
    assert executor.submit(lambda: "free").result(timeout=5) == "free"  # not blocked
    assert not handle.created.done() and events == []
    release.set()
    preloaded.result(timeout=5)
    handle.created.result(timeout=5)
    assert events == ["preloaded", "agent"]
