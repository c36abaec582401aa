"""bench/lsp_latency.py cannot pass on samples it did not take (issue 32, finding 9): on
28639e7 it took none while training or sampling and wrote p99 0.0 as a goal met."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bench.lsp_latency import (
    MIN_SAMPLES,
    Recorder,
    ShortOfSamples,
    check_samples,
    write_evidence,
)


def _samples(**counts: int) -> dict[str, dict[str, list[float]]]:
    return {
        phase: {kind: [0.001 * (i % 7 + 1) for i in range(n)] for kind in ("codeAction", "status")}
        for phase, n in counts.items()
    }


def test_a_phase_without_samples_fails_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "lsp_latency.json"
    out.write_text('{"old": true}\n')
    for short in ({"training": 0}, {"sampling": MIN_SAMPLES - 1}, {"idle": 3}):
        counts = {"idle": MIN_SAMPLES, "training": MIN_SAMPLES, "sampling": MIN_SAMPLES}
        counts.update(short)
        with pytest.raises(ShortOfSamples, match=next(iter(short))):
            write_evidence(_samples(**counts), out, MIN_SAMPLES)
        assert out.read_text() == '{"old": true}\n'  # nothing written
    with pytest.raises(ShortOfSamples):
        check_samples({"idle": _samples(idle=80)["idle"]})  # phases missing entirely


def test_enough_samples_write_the_evidence_with_their_counts(tmp_path: Path) -> None:
    out = tmp_path / "lsp_latency.json"
    numbers = write_evidence(_samples(idle=60, training=70, sampling=80), out, MIN_SAMPLES)
    written = json.loads(out.read_text())
    assert written == numbers
    for key in ("status_p99_ms_training", "code_action_p99_ms_training", "status_p99_ms_sampling"):
        assert written[key] == 7.0
    assert written["samples"] == {"idle": 120, "training": 140, "sampling": 160}
    assert written["goal_met"] is True


class _Editor:
    """Answers at once; status reports the queue depths given, then 0."""

    def __init__(self, depths: list[int]) -> None:
        self.depths = depths

    async def code_actions(self, uri: str, line: int) -> list[Any]:
        return []

    async def request(self, method: str, params: Any) -> dict[str, Any]:
        return {"queueDepth": self.depths.pop(0) if self.depths else 0}


def test_a_training_answer_counts_only_before_a_status_that_saw_the_step() -> None:
    """Answers after the step landed (the last status said queueDepth 0) are not
    training answers, whatever the phase the driver still has open."""
    rec = Recorder(_Editor([1, 1, 1]), "file:///x")  # type: ignore[arg-type]

    async def go() -> None:
        stop = asyncio.Event()
        rec.open("training")
        asking = asyncio.create_task(rec.run(stop))
        while rec.depth != 0:
            await asyncio.sleep(0.001)
        rec.open(None)
        stop.set()
        await asking

    asyncio.run(go())
    # codeAction, status(1) ×3 are confirmed; the codeAction before status(0) is not.
    assert len(rec.samples["training"]["status"]) == 3
    assert len(rec.samples["training"]["codeAction"]) == 3
