"""One connection's session: its state (state.py), its documents (documents.py), its
event pump (events.py), the agent it shares with other connections, and the means to
reach both: blocking Agent calls on the thread pool, background tasks, messages.

What the server does with these lives beside it, one module per job: proposals on
documents (proposals.py), decisions (decisions.py), edit signals (edit_signals.py),
files for the reviewer (reviewer_files.py), plain clients (plain_client.py), the disk
watcher (watcher.py), agent events to the client (delivery.py).

Everything here runs on the event loop; only `events.post` is called from other threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException, JsonRpcInternalError
from pygls.lsp.server import LanguageServer

from continual_lsp.config import Settings

from .agents import AgentHandle, AgentPool
from .documents import Documents
from .errors import RequestFailed, agent_error
from .events import EventPump
from .state import ClientCapabilities, SessionState

if TYPE_CHECKING:
    from continual_lsp.agent.agent import Agent

log = logging.getLogger(__name__)
T = TypeVar("T")

Deliver = Callable[["Session", str, Any], Awaitable[None]]


class Session:
    def __init__(
        self,
        ls: LanguageServer,
        settings: Settings,
        pool: AgentPool,
        executor: Executor,
        deliver: Deliver,
        *,
        default_workspace: Path | None = None,
    ) -> None:
        self.ls = ls
        self.settings = settings
        self.default_workspace = default_workspace  # stdio: the working directory
        self._pool = pool
        self._executor = executor
        self.loop = asyncio.get_running_loop()
        self.state = SessionState()
        self.documents = Documents(ls, self.state)
        self.events = EventPump(self.loop, partial(deliver, self), self.log_error)
        self.handle: AgentHandle | None = None
        # One decision at a time per connection: a double-clicked Approve must find the
        # proposal decided, not race the first click into two writes.
        self.decide_lock = asyncio.Lock()
        self.stopped = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = False
        self.spawn(self.events.run())

    @property
    def workspace(self) -> Path | None:
        return self.state.workspace

    # -- lifecycle -------------------------------------------------------------------------

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """A background task whose failure is logged to the client, never lost."""
        task = self.loop.create_task(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                self.log_error(f"background task failed: {t.exception()}")

        task.add_done_callback(done)
        return task

    def attach(self, workspace: Path, capabilities: ClientCapabilities) -> None:
        self.state.workspace = workspace.resolve()
        self.state.capabilities = capabilities
        self.handle = self._pool.acquire(self.settings, self.state.workspace, self.events)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = self.events.closed = True
        self.stopped.set()
        if self.handle is not None:
            self._pool.release(self.handle, self.events)
        for task in list(self._tasks):
            task.cancel()
        for region in self.state.applied.values():
            if region.timer:
                region.timer.cancel()

    # -- agent access ----------------------------------------------------------------------

    def _require_handle(self) -> AgentHandle:
        if self.handle is None:
            raise RequestFailed("the server is not initialized: send initialize first")
        return self.handle

    async def agent(self) -> Agent:
        """The Agent (store open, recovery done); its model may still be loading."""
        return await self._started(self._require_handle().agent())

    async def ready_agent(self) -> Agent:
        """The Agent with its model loaded."""
        return await self._started(self._require_handle().ready_agent())

    async def _started(self, waiting: Awaitable[Agent]) -> Agent:
        try:
            return await waiting
        except JsonRpcException:
            raise
        except Exception as exc:
            raise RequestFailed(f"the agent could not start: {exc}") from exc

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking Agent call on the thread pool; its errors become JSON-RPC errors."""
        try:
            return await self.loop.run_in_executor(self._executor, partial(fn, *args, **kwargs))
        except JsonRpcException:
            raise
        except Exception as exc:
            error = agent_error(exc)
            if isinstance(error, JsonRpcInternalError):
                log.exception("agent call %s failed", getattr(fn, "__name__", fn))
            raise error from exc

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking file IO on the thread pool, its errors as they are."""
        return await self.loop.run_in_executor(self._executor, fn, *args)

    # -- messages --------------------------------------------------------------------------

    def show_message(self, message: str, warn: bool = False) -> None:
        kind = lsp.MessageType.Warning if warn else lsp.MessageType.Info
        self.ls.window_show_message(lsp.ShowMessageParams(type=kind, message=message))

    def log_error(self, message: str) -> None:
        log.error("%s", message)
        with contextlib.suppress(Exception):
            self.ls.window_log_message(
                lsp.LogMessageParams(type=lsp.MessageType.Error, message=message)
            )
