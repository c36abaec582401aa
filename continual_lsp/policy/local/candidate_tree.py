"""Several tool calls from one prompt, decoded together as a tree over the shared prompt.

The prompt's K/V is computed once and never copied per candidate: the candidates' tokens
are packed after it (`CandidateTree`), each attending to the prompt and its own earlier
tokens. `LocalPolicy.logprobs_batch` scores several completions the same way.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from continual_lsp.policy.base import Completion, SampleParams
from continual_lsp.policy.hf_compat import returned_cache
from continual_lsp.policy.local.decode import CallState, Decoder, completion_text, opened
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
    *,
    draft: int = 0,
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
    `draft`: prompt-lookup tokens fed after each candidate's chunk, as one call's
    (speculate.py); a candidate's rejected ones stay in the cache, hidden (`forget`).
    """
    start = time.perf_counter()
    if not prompt_tokens:
        raise ValueError("constrained_decode_batch needs a non-empty prompt")
    if n < 1:
        raise ValueError(f"need at least one candidate, asked for {n}")
    with torch.inference_mode():
        decoder, fields = opened(
            model, grammar, prompt_tokens, params, prompt_cache, weights_key, draft
        )
        # Kept now, not after the steps as one call's is: by then the cache also holds
        # `n` candidates' K/V, which a stored entry would keep alive.
        decoder.keep_prompt()
        root = CallState(**fields)  # its generator is every row's: a seed fixes all `n`
        calls = [
            root.branch(0.0 if r < params.greedy_rows else params.temperature) for r in range(n)
        ]
        for call in calls:
            call.start(decoder.next_logits)
        _decode_tree(decoder, calls, len(prompt_tokens) + len(root.tokens), params.greedy_rows)

    seconds = time.perf_counter() - start
    return [
        Completion(
            tokens=c.tokens,
            logprobs=c.logprobs,
            text=completion_text(grammar, c.tokens, c.eos),
            forced=c.forced,
            seconds=seconds,
        )
        for c in calls
    ]


def _decode_tree(decoder: Decoder, calls: list[CallState], prefix: int, greedy_rows: int) -> None:
    """Step every candidate's call to its end, packed after the `prefix` shared tokens."""
    n = len(calls)
    tree = CandidateTree(prefix, n)
    while True:
        # A finished candidate leaves the step: its tokens stay in the cache, unseen.
        live = [(r, c.pending) for r, c in enumerate(calls) if c.pending]
        live = without_stragglers(live, [len(c.tokens) for c in calls], greedy_rows)
        if not live:
            return
        for r in set(range(n)) - {r for r, _ in live}:
            calls[r].pending = []  # cut as a straggler
        fed = [(r, calls[r].fed()) for r, _ in live]
        ids, mask, position_ids = tree.step(fed)
        logits, decoder.cache = tree_forward(
            decoder.model, decoder.cache, decoder.cache_keyword, ids, mask, position_ids
        )
        sizes = [len(tokens) for _, tokens in fed]
        for (r, _), rows in zip(fed, logits.split(sizes), strict=True):
            tree.forget(r, calls[r].take(rows))


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

    def forget(self, r: int, count: int) -> None:
        """Hide candidate r's last `count` slots (a draft's rejected tail) from every
        later token; r's next tokens take their positions."""
        if count > 0:
            mine = (self.owners == r).nonzero()[-count:, 0]
            self.owners[mine] = -1
            self.positions[r] -= count


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
