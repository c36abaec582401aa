"""Decoding every user's call together on one shared model (issue 34).

A team server's users used to take turns at the model (p50 time to a proposal x17 at 8
users). Here every call in flight is a `Row` of one batch, stepped by one pass
(`batch_forward.batched_forward`: packed tokens, the shared base weights once, each
row's own LoRA delta and K/V):

- Each row keeps its own grammar matcher, sampling generator, limits and draft
  (`decode.CallState`), so a row computes the tokens and log-probs it would alone.
- Continuous batching: `DecodeScheduler` is a thread that owns the steps of a host. A
  call opens its row in its own thread (the prompt cache's K/V, copied) and hands it
  over; the rest of its prompt is prefilled in the batch's steps, in pieces within a
  token budget beside the other rows' decode steps, then it decodes there. A row that
  finishes leaves at once; one handed over joins at the next step.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from continual_lsp.policy.base import Completion, SampleParams
from continual_lsp.policy.local.batch_forward import Adapter, RowCache, batched_forward
from continual_lsp.policy.local.decode import (
    CallState,
    call_fields,
    completion_text,
    opening_logprobs,
)
from continual_lsp.policy.local.grammar import ToolCallGrammar
from continual_lsp.policy.local.kv_cache import PromptCache


@dataclass(kw_only=True)
class Row(CallState):
    """One call in flight: its decoding state, what it decodes under, and the prompt
    tokens it still has to feed before its first chunk (`prefill`)."""

    adapter: Callable[[], Adapter]  # the row's LoRA tensors, looked up at each step
    cache: RowCache  # the row's own K/V (prompt, opening, fed chunks)
    grammar: ToolCallGrammar
    prompt_tokens: list[int]
    prompt_cache: PromptCache | None  # where the prompt's K/V goes once the row is done
    weights_key: Any
    prefill: list[int]  # prompt tokens past the prompt cache's, then the opening; fed first
    opening: int  # how many of the grammar's forced tokens end `prefill`
    started: float
    future: Future[Completion] = field(default_factory=Future)

    @property
    def done(self) -> bool:
        return not self.prefill and not self.pending

    def prefill_feed(self, budget: int) -> list[int]:
        """The next piece of `prefill` within `budget` tokens: all of it when it fits;
        else a cut that leaves the opening and the token before it for the last piece
        (their logits are the call's first); [] when no such cut fits."""
        if len(self.prefill) <= budget:
            return self.prefill
        return self.prefill[: max(0, min(budget, len(self.prefill) - self.opening - 1))]

    def prefilled(self, fed: int, logits: torch.Tensor) -> None:
        """`fed` tokens of `prefill` went through the model; at the last piece, `logits`
        are its last `opening + 1` rows: the opening's log-probs, and the first chunk."""
        self.prefill = self.prefill[fed:]
        if not self.prefill:
            self.logprobs = opening_logprobs(logits[:-1], self.tokens[: self.opening])
            self.start(logits[-1])

    def finish(self) -> Completion:
        """The call as `constrained_decode` returns it; its prompt's K/V kept in the
        prompt cache."""
        if self.prompt_cache is not None:
            self.prompt_cache.store(self.prompt_tokens, self.cache.dynamic(), self.weights_key)
        return Completion(
            tokens=self.tokens,
            logprobs=self.logprobs,
            text=completion_text(self.grammar, self.tokens, self.eos),
            forced=self.forced,
            seconds=time.perf_counter() - self.started,
        )


def open_row(
    model: Any,
    grammar: ToolCallGrammar,
    prompt_tokens: list[int],
    params: SampleParams,
    adapter: Callable[[], Adapter],
    prompt_cache: PromptCache | None = None,
    weights_key: Any = None,
    *,
    draft: int = 0,
) -> Row:
    """A call for the scheduler: its K/V as far as the prompt cache holds the prompt (a
    copy), and the rest of the prompt and the grammar's forced opening to prefill in the
    batch (`Row.prefill`), where other users' decode steps share its passes. A prefill
    done alone, under the model's lock, held every other user's decode for its length
    (~0.3 s a proposal after a cache hit on a 2-core EPYC: eight users, 2.4 s)."""
    started = time.perf_counter()
    opening, fields = call_fields(grammar, prompt_tokens, params, draft)
    reused, cached = 0, None
    if prompt_cache is not None:
        reused, cached = prompt_cache.lookup(prompt_tokens, weights_key)
    prefill = prompt_tokens[reused:] + opening
    room = len(prefill) + 64
    cache = RowCache(cached, room) if cached is not None else RowCache.empty(model, room)
    return Row(
        **fields,
        adapter=adapter,
        cache=cache,
        grammar=grammar,
        prompt_tokens=prompt_tokens,
        prompt_cache=prompt_cache,
        weights_key=weights_key,
        prefill=prefill,
        opening=len(opening),
        started=started,
    )


def step_rows(model: Any, rows: list[Row], prefill_budget: int = 1 << 30) -> list[Row]:
    """One pass for every row: a row decoding feeds its pending chunk and its draft,
    records what it keeps and chooses its next chunk; a row prefilling feeds the next
    piece of its prompt, the rows together at most `prefill_budget` prompt tokens (one
    row at least, so a long prompt cannot wait forever). Returns the rows now done."""
    feeds: list[tuple[Row, list[int], int]] = []  # (row, fed tokens, logit rows kept)
    left = prefill_budget
    for row in rows:
        if not row.prefill:
            fed = row.fed()
            feeds.append((row, fed, len(fed)))
            continue
        piece = row.prefill_feed(left)
        if not piece and left == prefill_budget:  # nothing else prefills: all of it
            piece = row.prefill
        if piece:
            left -= len(piece)
            feeds.append((row, piece, row.opening + 1 if piece is row.prefill else 0))
    with torch.inference_mode():
        logits = batched_forward(
            model,
            [fed for _, fed, _ in feeds],
            [row.cache for row, _, _ in feeds],
            [row.adapter() for row, _, _ in feeds],
            [kept for _, _, kept in feeds],
        )
        for (row, fed, _), out in zip(feeds, logits, strict=True):
            if row.prefill:
                row.prefilled(len(fed), out)
            else:
                row.cache.drop(row.take(out))
    return [r for r, _, _ in feeds if r.done]


class DecodeScheduler:
    """The thread that steps every call in flight on one host, one batch per step.

    `hold` is the host's model lock, taken for each step (scoring, training and calls
    decoded alone take it between steps); `yield_to` says whether other threads wait for
    it, in which case the scheduler lets them in before its next step (a Python lock is
    not fair). `after` runs for each finished row, still under the lock (the host's
    prompt-cache bound). `prefill_budget`: the prompt tokens one step may prefill, so
    that a new user's long prompt delays the others' next tokens by a bounded pass."""

    def __init__(
        self,
        model: Any,
        hold: Callable[[], contextlib.AbstractContextManager[Any]],
        yield_to: Callable[[], bool],
        after: Callable[[Row], None],
        prefill_budget: int = 256,
    ) -> None:
        self.model = model
        self.prefill_budget = prefill_budget
        self._hold = hold
        self._yield_to = yield_to
        self._after = after
        self._incoming: list[Row] = []
        self._active: list[Row] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self.steps = 0  # batched steps so far (tests, the bench)
        self.max_rows = 0  # the widest step so far

    def submit(self, row: Row) -> Future[Completion]:
        with self._wake:
            self._incoming.append(row)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="continual-lsp-decode", daemon=True
                )
                self._thread.start()
            self._wake.notify()
        return row.future

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._incoming and not self._active:
                    self._wake.wait()
                self._active += self._incoming
                self._incoming = []
            while self._yield_to():
                time.sleep(0.0005)
            rows = self._active
            try:
                with self._hold():
                    done = step_rows(self.model, rows, self.prefill_budget)
                    self.steps += 1
                    self.max_rows = max(self.max_rows, len(rows))
                    results = [(row, row.finish()) for row in done]
                    for row in done:
                        self._after(row)
            except BaseException as exc:  # every waiting call hears of it; none hangs
                self._active = []
                for row in rows:
                    if not row.future.done():
                        row.future.set_exception(exc)
                continue
            finished = {id(r) for r in done}
            self._active = [r for r in rows if id(r) not in finished]
            for row, completion in results:
                row.future.set_result(completion)
