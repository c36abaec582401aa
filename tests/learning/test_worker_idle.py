"""The training worker's idle time after a step (`warm_for_next_job`): the next step's
prompt K/V, its anchors', and the server's prompt start, none able to fail the worker."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from continual_lsp.learning.worker import warm_for_next_job
from continual_lsp.policy.base import Datum

JOB = {"payload": {"prompt_tokens": [1, 2, 3]}}


class _Scorer:
    def __init__(self, calls: list[str], fail: bool) -> None:
        self.calls, self.fail = calls, fail

    def warm_prefix(self, tokens: list[int]) -> None:
        self.calls.append(f"warm {tokens}")
        if self.fail:
            raise RuntimeError("no memory for the prefix")


class _Policy:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[str] = []
        self.fail = fail

    def logit_scorer(self) -> Any:
        return _Scorer(self.calls, self.fail)

    def keep_prompt_prefix(self) -> bool:
        self.calls.append("keep")
        if self.fail:
            raise OSError("disk full")
        return True


def test_the_next_step_and_the_servers_prompt_start_are_warmed() -> None:
    policy = _Policy()
    anchor = Datum(prompt_tokens=[1, 2, 7], completion_tokens=[8], rehearsal=True)
    warm_for_next_job(policy, JOB, [anchor])  # type: ignore[arg-type]
    assert policy.calls == ["warm [1, 2, 3]", "warm [1, 2, 7]", "keep"]


def test_neither_failure_reaches_the_worker(caplog: pytest.LogCaptureFixture) -> None:
    policy = _Policy(fail=True)
    with caplog.at_level(logging.WARNING):
        warm_for_next_job(policy, JOB)  # type: ignore[arg-type]
    assert policy.calls == ["warm [1, 2, 3]", "keep"]  # the second ran after the first failed
    assert "could not warm" in caplog.text and "could not keep the prompt start" in caplog.text
