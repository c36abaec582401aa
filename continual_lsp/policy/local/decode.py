"""Constrained decoding of one tool call under the grammar (grammar.py), over a KV cache.


Speed: most of a call is punctuation and key names the grammar forces. Those tokens are
never decoded one at a time: after each sampled token the matcher's fast-forward tokens
(`compute_ff_tokens`) are appended and fed together with the sampled token in **one**
forward pass over the KV cache; the forced opening `{"tool":"` rides along with the
prompt's prefill. A step where the mask allows a single token (the end-of-turn token
after the closing brace) needs no sampling either. `PromptCache` keeps the last prompt's
KV so the next prompt only prefills what it does not share (the system prompt and
earlier turns are shared between turns).

Logprobs: for every completion token, forced ones included, we record the *unmasked*
model log-softmax of that token at its position (temperature 1, no grammar mask). That is
what `Policy.logprobs()` computes with plain forward passes over prompt + completion,
so sampling-time and scoring-time logprobs agree (SDPO's importance ratios and
advantages rely on it) and the trainer gets a value for every completion token. The
sampling distribution itself (mask, temperature) is deliberately not what is recorded.
"""

from __future__ import annotations

import time
from typing import Any

import llguidance
import torch

from continual_lsp.policy.base import Completion, SampleParams
from continual_lsp.policy.hf_compat import cache_keyword
from continual_lsp.policy.local.grammar import ToolCallGrammar, allowed_mask
from continual_lsp.policy.local.kv_cache import PromptCache, forward


class Decoder:
    """Incremental forward passes over one growing sequence, with a KV cache."""

    def __init__(
        self,
        model: Any,
        prompt_tokens: list[int],
        opening: list[int],
        prompt_cache: PromptCache | None = None,
        weights_key: Any = None,
    ) -> None:
        """Prefill the prompt and the grammar's forced `opening` in one pass.

        `self.opening_logits` row i predicts opening[i]; `next_logits` predicts the token
        after the opening. Only those rows go through the LM head (576 x 49k a row, a large
        share of prefill if done for every prompt token).
        """
        self.model = model
        self.device = next(model.parameters()).device
        self.cache: Any = None
        self.cache_keyword = cache_keyword(model)
        self.prompt = (prompt_cache, prompt_tokens, weights_key)
        reused = 0
        if prompt_cache is not None:
            reused, self.cache = prompt_cache.lookup(prompt_tokens, weights_key)
        logits = self._forward(prompt_tokens[reused:] + opening, keep=len(opening) + 1)
        self.opening_logits = logits[:-1]
        self.next_logits = logits[-1]

    def keep_prompt(self) -> None:
        """Store the prompt's K/V in the prompt cache (one call's: once decoding is done).

        Taken from the cache as decoding left it, not right after the prefill: every step
        copies the K/V into longer tensors (`DynamicCache.update` concatenates), so an
        entry stored at the prefill was a second copy of the prompt's K/V held for the
        whole decode (~12 MB for a first proposal; the team server's peaks were such
        decodes). The stored tensors run past the prompt (the opening, the sampled
        tokens); lookups never use more positions than the stored prompt tokens.
        """
        prompt_cache, prompt_tokens, weights_key = self.prompt
        if prompt_cache is not None:
            prompt_cache.store(prompt_tokens, self.cache, weights_key)

    def _forward(self, tokens: list[int], keep: int) -> torch.Tensor:
        logits, self.cache = forward(self.model, tokens, self.cache, keep, self.cache_keyword)
        return logits.float()

    def feed(self, tokens: list[int]) -> torch.Tensor:
        """Append `tokens`; return logits predicting tokens[1:] and the next token."""
        logits = self._forward(tokens, keep=len(tokens))
        self.next_logits = logits[-1]
        return logits


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


def opening_logprobs(decoder: Decoder, opening: list[int]) -> list[float]:
    rows = torch.log_softmax(decoder.opening_logits, dim=-1)
    picked = torch.tensor(opening, dtype=torch.long, device=rows.device)
    return rows.gather(1, picked[:, None])[:, 0].tolist()


def feed_chunk(
    decoder: Decoder, pending: list[int], tokens: list[int], logprobs: list[float]
) -> None:
    """One forward pass for the sampled token and the tokens forced after it.

    Row i of `decoder.feed`'s logits predicts pending[i + 1]; the first pending token was
    predicted by the logits we already held.
    """
    first_lp = token_logprob(decoder.next_logits, pending[0])
    logits = decoder.feed(pending)
    log_probs = torch.log_softmax(logits[:-1], dim=-1)
    rest = torch.tensor(pending[1:], dtype=torch.long, device=logits.device)
    tokens.extend(pending)
    logprobs.append(first_lp)
    logprobs.extend(log_probs.gather(1, rest[:, None])[:, 0].tolist())


def completion_text(grammar: ToolCallGrammar, tokens: list[int], eos: set[int]) -> str:
    text = grammar.tokenizer.decode(
        [t for t in tokens if t not in eos], clean_up_tokenization_spaces=False
    )
    return str(text)


def constrained_decode(
    model: Any,
    grammar: ToolCallGrammar,
    prompt_tokens: list[int],
    params: SampleParams,
    prompt_cache: PromptCache | None = None,
    weights_key: Any = None,
) -> Completion:
    """Sample one tool call under the grammar; see the module docstring for logprobs.

    Stops at the end-of-turn token (recorded as the last completion token, as in
    `Renderer.render_call`), at `params.max_tokens`, or when the matcher errors. An
    unfinished call is returned as is: the caller's `parse_call` fails and it resamples.
    With a `prompt_cache`, the prompt prefix it shares with the previous prompt is not
    recomputed; `weights_key` identifies the current weights (a mismatch drops the cache).
    """
    start = time.perf_counter()
    if not prompt_tokens:
        raise ValueError("constrained_decode needs a non-empty prompt")
    generator = sample_generator(params)

    matcher = grammar.matcher()
    eos = set(grammar.eos_tokens)
    tokens: list[int] = []
    logprobs: list[float] = []
    forced = 0
    limit = max(0, params.max_tokens)

    # The grammar's opening (`{"tool":"`) is forced before anything is sampled: it goes
    # through the model in the same pass as the prompt.
    opening = take_tokens(matcher.compute_ff_tokens(), limit)
    if opening:
        matcher.consume_tokens(opening)
        forced += len(opening)
    pending: list[int] = []

    with torch.inference_mode():
        decoder = Decoder(model, prompt_tokens, opening, prompt_cache, weights_key)
        if opening:
            tokens.extend(opening)
            logprobs.extend(opening_logprobs(decoder, opening))
        while True:
            if pending:
                feed_chunk(decoder, pending, tokens, logprobs)
            pending, more = next_chunk(
                matcher,
                decoder.next_logits,
                tokens,
                logprobs,
                limit,
                eos,
                params.temperature,
                generator,
            )
            forced += more
            if not pending:
                break
        decoder.keep_prompt()

    return Completion(
        tokens=tokens,
        logprobs=logprobs,
        text=completion_text(grammar, tokens, eos),
        forced=forced,
        seconds=time.perf_counter() - start,
    )


def next_chunk(
    matcher: llguidance.LLMatcher,
    logits: torch.Tensor,
    tokens: list[int],
    logprobs: list[float],
    limit: int,
    eos: set[int],
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[list[int], int]:
    """The next token and the tokens the grammar forces after it (to feed in one pass),
    and how many of them the grammar forced; [] when the call has ended.

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
        token = choose_token(logits, mask, temperature, generator)
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
) -> int:
    masked = logits.masked_fill(~mask, float("-inf"))
    if temperature <= 0 or generator is None:
        return int(torch.argmax(masked))
    probs = torch.softmax(masked / temperature, dim=-1)
    # The generator lives on the CPU so a seed gives the same call on any device.
    return int(torch.multinomial(probs.cpu(), 1, generator=generator)[0])
