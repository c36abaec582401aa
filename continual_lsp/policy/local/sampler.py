"""Choosing a call's next tokens under the grammar: the sampled one, and those it forces.

Shared by every decode path (one call, a batch of users, a tree of candidates) so that a
call is the same whichever path decoded it.
"""

from __future__ import annotations

import llguidance
import torch

from continual_lsp.policy.base import SampleParams
from continual_lsp.policy.local.grammar import allowed_mask


def sample_generator(params: SampleParams) -> torch.Generator | None:
    """The sampling generator: None at temperature 0, unseeded when no seed is given."""
    if params.temperature <= 0:
        return None
    generator = torch.Generator()
    if params.seed is None:
        generator.seed()  # non-deterministic, as asked
    else:
        generator.manual_seed(params.seed)
    return generator


def next_chunk(
    matcher: llguidance.LLMatcher,
    logits: torch.Tensor,
    tokens: list[int],
    logprobs: list[float],
    limit: int,
    eos: set[int],
    temperature: float,
    generator: torch.Generator | None,
    draft: int | None = None,
) -> tuple[list[int], int]:
    """The next token and the tokens the grammar forces after it (to feed in one pass),
    and how many of them the grammar forced; [] when the call has ended. `draft`: a token
    already fed at this position (speculate.py), chosen by `choose_token`'s rule for one.

    An end-of-turn token is appended to `tokens` / `logprobs` here, since nothing is fed
    after it; an unfinished call (the limit, a grammar error) simply ends.
    """
    if len(tokens) >= limit or matcher.is_error():
        return [], 0
    mask = allowed_mask(matcher, logits.shape[-1]).to(logits.device)
    count = int(mask.sum())
    if count == 0:
        return [], 0  # the grammar is in an error state; the call ends as it is
    forced = 0
    if count == 1:
        token = int(mask.nonzero()[0, 0])
        forced = 1
    else:
        token = choose_token(logits, mask, temperature, generator, draft)
    if token in eos:
        tokens.append(token)
        logprobs.append(token_logprob(logits, token))
        matcher.consume_token(token)
        return [], forced
    if not matcher.consume_token(token):
        return [], forced
    chunk = [token]
    room = limit - len(tokens) - 1
    if room > 0 and not matcher.is_stopped():
        ff = take_tokens(matcher.compute_ff_tokens(), room)
        if ff:
            matcher.consume_tokens(ff)
            forced += len(ff)
            chunk.extend(ff)
    return chunk, forced


def take_tokens(tokens: list[int], room: int) -> list[int]:
    return list(tokens[: max(0, room)])


def token_logprob(logits: torch.Tensor, token: int) -> float:
    return float(torch.log_softmax(logits, dim=-1)[token])


def choose_token(
    logits: torch.Tensor,
    mask: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
    draft: int | None = None,
) -> int:
    """The masked argmax, or a draw at `temperature`. With a `draft` token the draw
    keeps it with its probability p(draft) and otherwise draws from p without it: each
    token still comes out with probability p (speculative sampling with a draft that is
    one token for sure), and the generator is used the same way on every decode path."""
    masked = logits.masked_fill(~mask, float("-inf"))
    if temperature <= 0 or generator is None:
        return int(torch.argmax(masked))
    probs = torch.softmax(masked / temperature, dim=-1)
    if draft is not None:
        keep = float(probs[draft])
        if float(torch.rand(1, generator=generator)[0]) < keep:
            return draft
        probs = probs.clone()
        probs[draft] = 0.0
    # The generator lives on the CPU so a seed gives the same call on any device.
    return int(torch.multinomial(probs.cpu(), 1, generator=generator)[0])


def record_chunk(
    chunk: list[int],
    before: torch.Tensor,
    rows: torch.Tensor,
    tokens: list[int],
    logprobs: list[float],
) -> None:
    """A fed chunk's tokens and log-probs: chunk[0] was predicted by `before`, chunk[i]
    by rows[i - 1] (the fed pass's logits; rows past the chunk belong to a draft)."""
    tokens.extend(chunk)
    logprobs.append(token_logprob(before, chunk[0]))
    if len(chunk) > 1:
        scored = torch.log_softmax(rows[: len(chunk) - 1], dim=-1)
        rest = torch.tensor(chunk[1:], dtype=torch.long, device=rows.device)
        logprobs.extend(scored.gather(1, rest[:, None])[:, 0].tolist())
