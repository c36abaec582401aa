"""A decision's learning step, announced (`continual/learned`) when it lands: an edit's
waited for at once, a denial's on one background thread while the reviewer reads the
retry."""

from __future__ import annotations

import logging
import queue
import threading

from continual_lsp.agent.proposal import AgentListener
from continual_lsp.agent.training_jobs import TrainingJobs
from continual_lsp.policy.base import Sampler
from continual_lsp.protocol import Learned as LearnedPayload

log = logging.getLogger(__name__)


class StepLanding:
    def __init__(self, training: TrainingJobs, listener: AgentListener) -> None:
        self._training = training
        self._listener = listener
        # Denials' steps land while the reviewer reads the retry: (proposal id, job id)
        # for `_land`, None to end it.
        self._landings: queue.Queue[tuple[str, int] | None] = queue.Queue()
        self._lander: threading.Thread | None = None

    def wait(
        self, proposal_id: str, job_id: int | None, policy: Sampler | None
    ) -> LearnedPayload | None:
        """Wait for a decision's step and announce it; with `policy` (the agent's lock
        held), the sampler serves the new version at once."""
        if job_id is None:
            return None
        note = self._training.wait(job_id, proposal_id, self._listener, policy)
        if note is None:
            return None
        self._listener.on_learned(note)
        return LearnedPayload(step=note.step, loss=note.loss, seconds=note.seconds)

    def in_background(self, proposal_id: str, job_id: int | None) -> None:
        """Hand a denial's step to `_land`, which waits for it without the agent's lock
        (so without touching the sampler: a turn's sampling swaps it in under the lock)."""
        if job_id is None:
            return
        if self._lander is None:
            self._lander = threading.Thread(
                target=self._land, name="continual-learned", daemon=True
            )
            self._lander.start()
        self._landings.put((proposal_id, job_id))

    def _land(self) -> None:
        """Wait for each step in turn, on one thread for the agent's life (the steps land
        in the order the reviewer gave the corrections)."""
        while (item := self._landings.get()) is not None:
            try:
                self.wait(*item, None)
            except Exception:  # a thread's error reaches no caller: the log keeps it
                log.exception("waiting for the step of %s failed", item[0])
            finally:
                self._landings.task_done()
        self._landings.task_done()

    def join(self) -> None:
        """Wait for the denials' steps still running (each up to the wait limit)."""
        self._landings.join()

    def close(self) -> None:
        if self._lander is not None:
            self._landings.put(None)  # ends `_land` once the training's `stop` ends its wait
