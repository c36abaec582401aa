"""Agent events, replayed on the event loop in the order they happened.

Agent callbacks come from executor threads: `post` hands each to the loop, and one pump
task delivers them one at a time. Proposal and task-done events wait while a response
that carries the same news is being written (`holding`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

HELD_KINDS = ("proposal", "taskDone")


class EventPump:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[str, Any], Awaitable[None]],
        on_error: Callable[[str], None],
    ) -> None:
        self.loop = loop
        self._deliver = deliver
        self._on_error = on_error
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._held: list[tuple[str, Any]] = []
        self._holds = 0
        self.closed = False

    def post(self, kind: str, payload: Any) -> None:
        """Queue one event; safe from any thread (the listener's sink)."""
        if not self.closed:
            with contextlib.suppress(RuntimeError):  # the loop closed under an agent thread
                self.loop.call_soon_threadsafe(self._queue.put_nowait, (kind, payload))

    def announce(self, kind: str, payload: Any) -> None:
        """Queue an event from the loop itself (e.g. a proposal an Agent call returned)."""
        self._queue.put_nowait((kind, payload))

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Hold proposal/taskDone events until the current response is written.

        `continual/startTask` answers `{taskId, proposal}` and the notification repeats
        the proposal: the agent announces it before its call returns, so without holding
        it the client would see a proposal for a task id it does not know yet.
        """
        self._holds += 1
        try:
            yield
        finally:
            # Two hops: the handler's result is sent by a done-callback scheduled when the
            # handler's task finishes, i.e. after the first hop and before the second.
            self.loop.call_soon(self.loop.call_soon, self._release)

    def _release(self) -> None:
        self._holds -= 1
        if self._holds == 0:
            held, self._held = self._held, []
            for event in held:
                self._queue.put_nowait(event)

    async def run(self) -> None:
        while True:
            kind, payload = await self._queue.get()
            if self._holds and kind in HELD_KINDS:
                self._held.append((kind, payload))
                continue
            try:
                await self._deliver(kind, payload)
            except Exception as exc:
                log.exception("dispatching %s failed", kind)
                self._on_error(f"could not deliver {kind}: {exc}")
