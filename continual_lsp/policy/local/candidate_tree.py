"""Several tool calls from one prompt, decoded together as a tree over the shared prompt.

The prompt's K/V is computed once and never copied per candidate: the candidates' tokens
are packed after it (`CandidateTree`), each attending to the prompt and its own earlier
tokens. `LocalPolicy.logprobs_batch` scores several completions the same way.
"""

from __future__ import annotations

import time
from typing import Any

import llguidance
import torch

from continual_lsp.policy.base import Completion, SampleParams
from continual_lsp.policy.hf_compat import returned_cache
from continual_lsp.policy.local.decode import (
    Decoder,
    completion_text,
    next_chunk,
    opening_logprobs,
    sample_generator,
    take_tokens,
    token_logprob,
)
from continual_lsp.policy.local.grammar import ToolCallGrammar
from continual_lsp.policy.local.kv_cache import PromptCache


def constrained_decode_batch(
    model: Any,
    grammar: ToolCallGrammar,
    prompt_tokens: list[int],
    params: SampleParams,
    n: int,
    prompt_cache: PromptCache | None = None,
    weights_key: Any = None,
) -> list[Completion]:
    """`n` tool calls from one prompt, decoded together: one forward pass per step for all.

    The prompt (and the grammar's forced opening) is prefilled once and its K/V is shared
    by every candidate, never copied per row: the candidates' tokens are packed into one
    sequence after it (a tree), and an attention mask lets each token see the prompt and
    its own candidate's earlier tokens only, at its own candidate's position ids. So a
    step costs the tokens the live candidates feed (a sampled token plus the tokens the
    grammar forces after it), with no padding to the longest chunk, and attention reads
    the prompt's K/V once instead of `n` times; each candidate computes what it would
    alone. Logprobs are recorded as in `constrained_decode` (unmasked, temperature 1).
    Rows share one seeded generator, so a seed gives the same `n` calls every time; the
    first `params.greedy_rows` rows (and all of them at temperature 0) are the greedy call.
    """
    start = time.perf_counter()
    if not prompt_tokens:
        raise ValueError("constrained_decode_batch needs a non-empty prompt")
    if n < 1:
        raise ValueError(f"need at least one candidate, asked for {n}")
    generator = sample_generator(params)
    eos = set(grammar.eos_tokens)
    limit = max(0, params.max_tokens)
    matchers, opening = _opened_matchers(grammar, n, limit)
    tokens: list[list[int]] = [list(opening) for _ in range(n)]
    logprobs: list[list[float]] = [[] for _ in range(n)]
    forced = [len(opening)] * n

    with torch.inference_mode():
        decoder = Decoder(model, prompt_tokens, opening, prompt_cache, weights_key)
        # Kept now, not after the steps as one call's is: by then the cache also holds
        # `n` candidates' K/V, which a stored entry would keep alive.
        decoder.keep_prompt()
        if opening:
            opening_lps = opening_logprobs(decoder, opening)
            for row in logprobs:
                row.extend(opening_lps)
        tree = CandidateTree(len(prompt_tokens) + len(opening), n)
        # Row r: the logits after candidate r's last fed token.
        next_logits = decoder.next_logits.unsqueeze(0).repeat(n, 1)
        alive = list(range(n))
        while True:
            chunks = _next_chunks(
                matchers,
                alive,
                next_logits,
                tokens,
                logprobs,
                forced,
                limit,
                eos,
                params,
                generator,
            )
            # A finished candidate leaves the step: its tokens stay in the cache, unseen.
            live = [(r, chunk) for r, chunk in zip(alive, chunks, strict=True) if chunk]
            live = without_stragglers(live, [len(row) for row in tokens], params.greedy_rows)
            if not live:
                break
            alive = [r for r, _ in live]
            ids, mask, position_ids = tree.step(live)
            logits, decoder.cache = tree_forward(
                decoder.model, decoder.cache, decoder.cache_keyword, ids, mask, position_ids
            )
            _record_step(live, logits, next_logits, tokens, logprobs)

    return _completions(grammar, tokens, logprobs, forced, eos, time.perf_counter() - start)


def without_stragglers(
    live: list[tuple[int, list[int]]], lengths: list[int], greedy_rows: int
) -> list[tuple[int, list[int]]]:
    """`live` without the sampled candidates that ramble: once half the candidates have
    finished, one that has grown past twice the longest finished is cut where it is.

    Every step waits for the slowest candidate, so one row that never closes its content
    held the others' answer back for up to `max_tokens` steps (measured: rows of 192
    tokens beside finished ones of 38-63, the choice 27 s instead of ~6 s). Cut short, it
    does not parse and is dropped like any call cut at the budget. The greedy rows run to
    their end: they are the model's best guess, however long."""
    running = {r for r, _ in live}
    finished = [n for r, n in enumerate(lengths) if r not in running]
    if 2 * len(finished) < len(lengths):
        return live
    bound = 2 * max(finished)
    return [(r, chunk) for r, chunk in live if r < greedy_rows or lengths[r] <= bound]


def _opened_matchers(
    grammar: ToolCallGrammar, n: int, limit: int
) -> tuple[list[llguidance.LLMatcher], list[int]]:
    """`n` matchers past the grammar's forced opening, and that opening."""
    matchers = [grammar.matcher() for _ in range(n)]
    opening = take_tokens(matchers[0].compute_ff_tokens(), limit)
    for matcher in matchers:
        if opening:
            matcher.consume_tokens(opening)
    return matchers, opening


def _next_chunks(
    matchers: list[llguidance.LLMatcher],
    alive: list[int],
    next_logits: torch.Tensor,
    tokens: list[list[int]],
    logprobs: list[list[float]],
    forced: list[int],
    limit: int,
    eos: set[int],
    params: SampleParams,
    generator: torch.Generator | None,
) -> list[list[int]]:
    """`next_chunk` for every live candidate, in the order of `alive`."""
    chunks: list[list[int]] = []
    for r in alive:
        temperature = 0.0 if r < params.greedy_rows else params.temperature
        chunk, more = next_chunk(
            matchers[r],
            next_logits[r],
            tokens[r],
            logprobs[r],
            limit,
            eos,
            temperature,
            generator,
        )
        chunks.append(chunk)
        forced[r] += more
    return chunks


class CandidateTree:
    """The candidates' tokens packed after the shared prompt in one cached sequence (the
    batched decode here, the batched scoring in `LocalPolicy.logprobs_batch`).

    Each cache slot past the prompt belongs to one candidate, at that candidate's own
    position: a token may attend to the whole prompt, and to the slots of its own
    candidate at or before its position (earlier steps, and causally within its chunk).
    """

    def __init__(self, prefix: int, n: int) -> None:
        self.prefix = prefix
        self.positions = [prefix] * n  # each candidate's next position id
        self.owners = torch.empty(0, dtype=torch.long)
        self.slot_positions = torch.empty(0, dtype=torch.long)

    def step(self, live: list[tuple[int, list[int]]]) -> tuple[list[int], torch.Tensor, list[int]]:
        """This step's packed ids, its (1, 1, fed, cache + fed) mask and position ids."""
        ids: list[int] = []
        owners: list[int] = []
        positions: list[int] = []
        for r, chunk in live:
            ids.extend(chunk)
            owners.extend([r] * len(chunk))
            positions.extend(range(self.positions[r], self.positions[r] + len(chunk)))
            self.positions[r] += len(chunk)
        rows = torch.tensor(owners, dtype=torch.long)
        where = torch.tensor(positions, dtype=torch.long)
        self.owners = torch.cat([self.owners, rows])
        self.slot_positions = torch.cat([self.slot_positions, where])
        own = (self.owners[None, :] == rows[:, None]) & (
            self.slot_positions[None, :] <= where[:, None]
        )
        prompt = torch.ones(len(ids), self.prefix, dtype=torch.bool)
        return ids, torch.cat([prompt, own], dim=1)[None, None], positions


def tree_forward(
    model: Any,
    cache: Any,
    keyword: str,
    ids: list[int],
    mask: torch.Tensor,
    position_ids: list[int],
) -> tuple[torch.Tensor, Any]:
    """One pass of a packed step (`CandidateTree.step`) over `cache`: the float logits of
    every fed token, and the cache that now holds them too."""
    device = next(model.parameters()).device
    out = model(
        input_ids=torch.tensor([ids], dtype=torch.long, device=device),
        attention_mask=mask.to(device),
        position_ids=torch.tensor([position_ids], dtype=torch.long, device=device),
        use_cache=True,
        logits_to_keep=len(ids),
        **{keyword: cache},
    )
    return out.logits[0].float(), returned_cache(out)


def _record_step(
    live: list[tuple[int, list[int]]],
    logits: torch.Tensor,
    next_logits: torch.Tensor,
    tokens: list[list[int]],
    logprobs: list[list[float]],
) -> None:
    """Append each candidate's chunk and its logprobs (its rows of the packed `logits`,
    in `live` order); `next_logits[r]` becomes the logits after candidate r's chunk."""
    offset = 0
    for r, chunk in live:
        rows = logits[offset : offset + len(chunk)]
        offset += len(chunk)
        first = token_logprob(next_logits[r], chunk[0])
        scored = torch.log_softmax(rows[:-1], dim=-1)
        rest = torch.tensor(chunk[1:], dtype=torch.long, device=scored.device)
        tokens[r].extend(chunk)
        logprobs[r].append(first)
        logprobs[r].extend(scored.gather(1, rest[:, None])[:, 0].tolist())
        next_logits[r] = rows[-1]


def _completions(
    grammar: ToolCallGrammar,
    tokens: list[list[int]],
    logprobs: list[list[float]],
    forced: list[int],
    eos: set[int],
    seconds: float,
) -> list[Completion]:
    return [
        Completion(
            tokens=row,
            logprobs=lps,
            text=completion_text(grammar, row, eos),
            forced=f,
            seconds=seconds,
        )
        for row, lps, f in zip(tokens, logprobs, forced, strict=True)
    ]
