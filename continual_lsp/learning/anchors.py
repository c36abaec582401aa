"""Anchors: calls the starter was taught, kept likely while the reviewer teaches others.

An SDPO step moves the adapter towards what one correction asks, and nothing in its
datums says what else must stay: on the starter shipped 2026-12-06, thirteen lessons of
one convention (32 steps, deny-only) left a model that wrote that convention's first
word (`uv`) into every command, path and summary, and finished 0 of the 36 one-step
agent-skill tasks it had finished 30 of (`bench/learning/through_agent.py --forgetting`).
Rehearsal is the usual cure for such forgetting, and the starter's own curriculum is
the natural thing to rehearse: `anchors.jsonl` beside the starter adapter holds calls
from it (prompt and call tokens, written by `curriculum.train anchors` from a seed the
training shards do not use), and each step carries `anchors_per_step` of them, in turn.

A step can still undo the starter where no anchor rehearses it, so some anchors
(`GATE_SIZE`, every tool in turn, the shortest prompts first) are held out of the
rehearsal and gate every step: `skill_cost` is their mean
per-token loss under the new weights minus that under the starter (the reference), and
the worker undoes a step that raises it past `anchor_gate_nats` (`learning/worker.py`).
Measured on the collapsed adapter above (eight first calls): 0.03 nats per token under the
starter, 0.41 under it; an adapter that had learned a rule without collapsing stayed
within 0.02.

An anchor's datum is on-policy (ratio 1) with advantage `anchor_advantage` on every
call token: the step raises the log-probability of the starter's call as much as it
has fallen (the gradient of `−log π` vanishes where π is already near 1). It gets no KL
term and its prompt's K/V is not kept (`Datum.rehearsal`): with them, four anchors made
a 2k-context step 3.9x slower (`bench/sdpo_step.py`).

They are the embedded model's tokens, with the starter merged locally: another model,
another backend or `starter = false` gets none.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from continual_lsp.config import Settings
from continual_lsp.policy import model_files
from continual_lsp.policy.base import Datum, Sampler

log = logging.getLogger(__name__)

ANCHORS_FILE = "anchors.jsonl"


class Anchor(BaseModel):
    """One call of the starter's curriculum: the prompt the agent would render, the call."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_tokens: list[int] = Field(min_length=1)
    completion_tokens: list[int] = Field(min_length=1)
    kind: str  # the exercise kind it came from (typo, failing_test …)
    tool: str  # the call's tool


@functools.cache
def _read(path: Path, mtime: float) -> tuple[Anchor, ...]:
    """The file's anchors; () and one warning (per version of the file) when a line is
    not an anchor: a damaged file must not fail every training job, and rehearsing part
    of it would tilt the steps toward the tools that survived."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("anchors unreadable at %s (%s): SDPO steps rehearse nothing", path, exc)
        return ()
    anchors = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            anchors.append(Anchor.model_validate_json(line))
        except ValidationError as exc:
            first = exc.errors()[0]
            log.warning(
                "anchors at %s line %d are not anchors (%s: %s): SDPO steps rehearse nothing "
                "and no gate runs; rebuild them with `python -m continual_lsp.curriculum.train "
                "anchors`",
                path, number, first["loc"], first["msg"],
            )  # fmt: skip
            return ()
    return tuple(anchors)


def _anchors_file(settings: Settings) -> tuple[Path, float] | None:
    """The anchors file and its mtime, or None where anchors do not apply (another model,
    no starter, a backend that does not merge it, a starter directory without the file:
    then once a warning)."""
    local = settings.backend == "local"
    if not local or not model_files.starter_applies(settings.model, settings.starter):
        return None
    path = model_files.STARTER_DIR / ANCHORS_FILE
    if not path.is_file():
        _warn_missing(path)
        return None
    return path, path.stat().st_mtime


def load_anchors(settings: Settings) -> tuple[Anchor, ...]:
    """The starter's anchors, or () where they do not apply."""
    found = _anchors_file(settings)
    return () if found is None else _read(*found)


@functools.cache
def _warn_missing(path: Path) -> None:
    log.warning("no anchors at %s: SDPO steps rehearse nothing the starter knew", path)


GATE_SIZE = 8


def tools_in_turn(anchors: Iterable[Anchor], count: int) -> list[Anchor]:
    """Up to `count` of `anchors`, one of each tool in turn (tools by name), each tool's
    in the order given: so edits and `done`s are not outnumbered by first reads."""
    by_tool: dict[str, list[Anchor]] = {}
    for a in anchors:
        by_tool.setdefault(a.tool, []).append(a)
    queues = [by_tool[tool] for tool in sorted(by_tool)]
    picked: list[Anchor] = []
    while len(picked) < count and any(queues):
        picked += [q.pop(0) for q in queues if q][: count - len(picked)]
    return picked


def gate_anchors(pool: tuple[Anchor, ...]) -> tuple[Anchor, ...]:
    """The gate's anchors: `GATE_SIZE` of them, the tools in turn, the shortest prompts
    of each tool first."""
    if len(pool) <= GATE_SIZE:
        return pool
    return tuple(tools_in_turn(sorted(pool, key=lambda a: len(a.prompt_tokens)), GATE_SIZE))


def rehearsed_anchors(pool: tuple[Anchor, ...]) -> tuple[Anchor, ...]:
    """What the steps rehearse: the pool without the gate's anchors (held out from it)."""
    gate = {id(a) for a in gate_anchors(pool)}
    rest = tuple(a for a in pool if id(a) not in gate)
    return rest or pool


def skill_cost(policy: Sampler, settings: Settings) -> float | None:
    """Mean per-token loss of the gate's anchors under the current weights minus that
    under the reference (the starter): how much of what the starter knew a step cost.
    None where no anchors apply."""
    found = _anchors_file(settings)
    pool = () if found is None else _read(*found)
    if found is None or not pool:
        return None
    gate = gate_anchors(pool)
    before = _reference_losses(policy, *found)
    now = _packed_losses(policy, gate)
    return sum(n - b for n, b in zip(now, before, strict=True)) / len(gate)


def _packed_losses(policy: Sampler, gate: tuple[Anchor, ...]) -> list[float]:
    """Each anchor's loss under the current weights, all scored in one batch after the
    prompt prefix they share (the system prompt): the prefix once and one pass for the
    rest, instead of a prefill and a pass per anchor (the same losses to 1e-5; 2.0 s
    instead of 3.5 s for the eight on the 2-core build machine)."""
    prompts = [a.prompt_tokens for a in gate]
    shared = next(
        (i for i, column in enumerate(zip(*prompts, strict=False)) if len(set(column)) > 1),
        min(len(p) for p in prompts),
    )
    if shared == 0:  # nothing shared (not the renderer's anchors): one by one
        return [_loss(policy.logprobs(a.prompt_tokens, a.completion_tokens)) for a in gate]
    scores = policy.logprobs_batch(
        gate[0].prompt_tokens[:shared],
        [a.prompt_tokens[shared:] + a.completion_tokens for a in gate],
    )
    return [
        _loss(score[-len(a.completion_tokens) :]) for score, a in zip(scores, gate, strict=True)
    ]


def _loss(logprobs: list[float]) -> float:
    return -sum(logprobs) / len(logprobs)


@functools.lru_cache(maxsize=4)
def _reference_losses(policy: Sampler, path: Path, mtime: float) -> tuple[float, ...]:
    """The gate's losses under the reference, computed once per policy and anchors file:
    the reference's weights never change (and its scoring keeps no prompt cache)."""
    gate = gate_anchors(_read(path, mtime))
    return tuple(
        _loss(policy.reference_logprobs(a.prompt_tokens, a.completion_tokens)) for a in gate
    )


def anchor_datums(settings: Settings, step: int) -> list[Datum]:
    """The `anchors_per_step` rehearsed anchors of step `step` (in turn), as datums."""
    pool = rehearsed_anchors(load_anchors(settings))
    n = min(settings.anchors_per_step, len(pool))
    picked = [pool[(step * n + i) % len(pool)] for i in range(n)]
    return [
        Datum(
            prompt_tokens=a.prompt_tokens,
            completion_tokens=a.completion_tokens,
            advantages=[settings.anchor_advantage] * len(a.completion_tokens),
            rehearsal=True,
        )
        for a in picked
    ]
