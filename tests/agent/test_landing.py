"""StepLanding: a decision's step announced once it lands, a denial's in the background."""

from __future__ import annotations

from typing import Any

from continual_lsp.agent.landing import StepLanding
from continual_lsp.agent.proposal import SilentListener
from continual_lsp.protocol import LearnedNotification


class _Training:
    """TrainingJobs as far as the landing reads it: each job's step lands at once."""

    def __init__(self) -> None:
        self.samplers: list[Any] = []

    def wait(self, job_id: int, proposal_id: str, listener: Any, policy: Any) -> Any:
        self.samplers.append(policy)
        if job_id < 0:
            return None  # the step did not land in time
        return LearnedNotification(proposal_id=proposal_id, step=job_id, loss=0.5, seconds=1.0)


class _Listener(SilentListener):
    def __init__(self) -> None:
        self.learned: list[str] = []

    def on_learned(self, note: LearnedNotification) -> None:
        self.learned.append(note.proposal_id)


def test_a_step_waited_for_is_announced_and_returned() -> None:
    listener, training = _Listener(), _Training()
    landing = StepLanding(training, listener)  # type: ignore[arg-type]
    learned = landing.wait("p1", 3, policy="sampler")
    assert learned is not None and learned.step == 3 and listener.learned == ["p1"]
    assert training.samplers == ["sampler"]
    assert landing.wait("p2", None, None) is None and landing.wait("p3", -1, None) is None
    assert listener.learned == ["p1"]


def test_denials_steps_land_in_order_in_the_background_without_the_sampler() -> None:
    listener, training = _Listener(), _Training()
    landing = StepLanding(training, listener)  # type: ignore[arg-type]
    landing.in_background("p1", 1)
    landing.in_background("p2", 2)
    landing.in_background("p3", None)  # no job: nothing to wait for
    landing.join()
    assert listener.learned == ["p1", "p2"] and training.samplers == [None, None]
    landing.close()
