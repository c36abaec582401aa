"""Agents shared across connections, and the listener that turns agent events into
per-connection events.

One Agent per (user, workspace) in a process: a TCP bot that reconnects finds its
pending proposal and loaded model again, and two editors of the same user on the same
workspace see the same proposals. Agent callbacks come from executor threads; the
fan-out listener only hands them to each session's thread-safe `post`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from continual_lsp.agent.agent import Agent
from continual_lsp.agent.preload import preload_model
from continual_lsp.config import Settings
from continual_lsp.protocol import LearnedNotification, RoutedNotification, TaskDoneNotification

from .errors import RequestFailed

if TYPE_CHECKING:
    from continual_lsp.agent.proposal import AgentListener, Proposal

log = logging.getLogger(__name__)

AgentFactory = Callable[[Settings, Path, "AgentListener"], "Agent"]


def default_agent_factory(settings: Settings, workspace: Path, listener: AgentListener) -> Agent:
    return Agent(settings, workspace, listener=listener)


class EventSink(Protocol):
    """What a connection offers the listener: a thread-safe way to queue one event."""

    def post(self, kind: str, payload: Any) -> None: ...


class FanOutListener:
    """AgentListener that forwards every event to each attached connection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sinks: list[EventSink] = []

    def attach(self, sink: EventSink) -> None:
        with self._lock:
            self._sinks.append(sink)

    def detach(self, sink: EventSink) -> None:
        with self._lock:
            if sink in self._sinks:
                self._sinks.remove(sink)

    def _post(self, kind: str, payload: Any) -> None:
        with self._lock:
            sinks = list(self._sinks)
        for sink in sinks:
            sink.post(kind, payload)

    def on_proposal(self, proposal: Proposal) -> None:
        self._post("proposal", proposal)

    def on_learned(self, note: LearnedNotification) -> None:
        self._post("learned", note)

    def on_routed(self, note: RoutedNotification) -> None:
        self._post("routed", note)

    def on_task_done(self, note: TaskDoneNotification) -> None:
        self._post("taskDone", note)

    def on_progress(
        self, token: str, title: str, message: str, percentage: int | None, done: bool
    ) -> None:
        self._post("progress", (token, title, message, percentage, done))


@dataclass
class AgentHandle:
    key: tuple[str, str]
    settings: Settings
    workspace: Path
    listener: FanOutListener
    created: Future[Agent]  # the Agent object (store open, crash recovery done)
    ready: Future[Agent]  # … and its model loaded, so the first proposal is not a cold start
    users: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    async def agent(self) -> Agent:
        return await asyncio.wrap_future(self.created)

    async def ready_agent(self) -> Agent:
        return await asyncio.wrap_future(self.ready)


class AgentPool:
    def __init__(
        self, factory: AgentFactory, executor: Executor, max_users: int | None = None
    ) -> None:
        self._factory = factory
        self._executor = executor
        self._handles: dict[tuple[str, str], AgentHandle] = {}
        self.max_users = max_users
        self._preloaded: Future[None] | None = None  # `preload`'s, while it may run

    def connected_users(self) -> set[str]:
        """Users with at least one open connection."""
        return {handle.key[0] for handle in self._handles.values() if handle.users > 0}

    def acquire(self, settings: Settings, workspace: Path, sink: EventSink) -> AgentHandle:
        """Called on the event loop only (initialize), so the dict needs no lock.

        A user past `max_users` is refused before anything of theirs is opened: the
        editor reads why, and nothing is lost (their store was never touched)."""
        key = (settings.user, str(workspace))
        users = self.connected_users()
        limit = self.max_users
        if limit is not None and settings.user not in users and len(users) >= limit:
            raise RequestFailed(
                f"this server is serving {len(users)} users, its limit (max_users = "
                f"{limit}); nothing was opened for {settings.user!r}: connect again "
                "when someone disconnects, or ask for a higher limit"
            )
        handle = self._handles.get(key)
        if handle is None or (handle.created.done() and handle.created.exception() is not None):
            listener = FanOutListener()
            created = self._after_preload(self._factory, settings, workspace, listener)
            ready: Future[Agent] = Future()
            created.add_done_callback(lambda fut: self._warm(fut, ready))
            handle = AgentHandle(key, settings, workspace, listener, created, ready)
            self._handles[key] = handle
        handle.listener.attach(sink)
        handle.users += 1
        return handle

    def _after_preload(self, factory: AgentFactory, *args: Any) -> Future[Agent]:
        """`factory(*args)` on the executor once the preload has finished (at once when
        none runs): an agent built beside the preload imported transformers on two
        threads at once, and the preload failed ("cannot import name 'AutoModel'"), so
        every first proposal waited for a model load of its own (team bench, 2-core
        EPYC). Chained, not waited for: no executor thread blocks on the preload."""
        created: Future[Agent] = Future()

        def run(_: object = None) -> None:
            try:
                inner = self._executor.submit(factory, *args)
            except RuntimeError as err:  # the server closed while the preload ran
                created.set_exception(err)
                return
            inner.add_done_callback(lambda done: _copy_outcome(done, created))

        preloaded = self._preloaded
        if preloaded is None:
            run()
        else:
            preloaded.add_done_callback(run)
        return created

    def _warm(self, created: Future[Agent], ready: Future[Agent]) -> None:
        exc = created.exception()
        if exc is not None:
            ready.set_exception(exc)
            return
        agent = created.result()

        def load() -> None:
            try:
                # The real Agent builds its policy lazily; touching it here loads the model
                # while the reviewer is still typing the task.
                policy = getattr(agent, "policy", None)
            except Exception as err:  # the error resurfaces, with its message, on use
                log.warning("loading the model failed: %s", err)
                policy = None
            ready.set_result(agent)
            # Then the prompt's fixed start (system prompt, tool schema) under this user's
            # adapter, so the first task prefills only its own words.
            warm = getattr(policy, "warm_prompt", None)
            if callable(warm):
                try:
                    warm()
                except Exception as err:  # only a cache: the first proposal prefills it
                    log.warning("warming the prompt cache failed: %s", err)

        self._executor.submit(load)

    def preload(self, settings: Settings) -> Future[None]:
        """Load the process's shared model in the background, at start: the first
        editor to connect then waits for no model load, merge or grammar compile."""

        def load() -> None:
            try:
                preload_model(settings)
            except Exception as err:  # the first agent's load reports it in its own words
                log.warning("preloading the model failed: %s", err)

        self._preloaded = self._executor.submit(load)
        return self._preloaded

    def release(self, handle: AgentHandle, sink: EventSink) -> None:
        handle.listener.detach(sink)
        handle.users -= 1

    def close_all(self) -> None:
        for handle in self._handles.values():
            if handle.created.done() and handle.created.exception() is None:
                try:
                    handle.created.result().close()
                except Exception as exc:
                    log.warning("closing the agent for %s failed: %s", handle.key, exc)
        self._handles.clear()


def _copy_outcome(source: Future[Any], target: Future[Any]) -> None:
    if source.cancelled():
        target.cancel()
        return
    exc = source.exception()
    if exc is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())
