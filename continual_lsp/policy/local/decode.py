"""Constrained decoding of one tool call under the grammar (grammar.py), over a KV cache.


Speed: most of a call is punctuation and key names the grammar forces. Those tokens are
never decoded one at a time: after each sampled token the matcher's fast-forward tokens
(`compute_ff_tokens`) are appended and fed together with the sampled token in **one**
forward pass over the KV cache; the forced opening `{"tool":"` rides along with the
prompt's prefill. A step where the mask allows a single token (the end-of-turn token
after the closing brace) needs no sampling either. `PromptCache` keeps the last prompt's
KV so the next prompt only prefills what it does not share (the system prompt and
earlier turns are shared between turns). Tokens the call copies from its prompt ride
along with a chunk as a draft and are kept where the sampler agrees (speculate.py).

Logprobs: for every completion token, forced ones included, we record the *unmasked*
model log-softmax of that token at its position (temperature 1, no grammar mask). That is
what `Policy.logprobs()` computes with plain forward passes over prompt + completion,
so sampling-time and scoring-time logprobs agree (SDPO's importance ratios and
advantages rely on it) and the trainer gets a value for every completion token. The
sampling distribution itself (mask, temperature) is deliberately not what is recorded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import llguidance
import torch

from continual_lsp.policy.base import Completion, SampleParams
from continual_lsp.policy.hf_compat import cache_keyword
from continual_lsp.policy.local.grammar import ToolCallGrammar
from continual_lsp.policy.local.kv_cache import PromptCache, cache_layers, forward
from continual_lsp.policy.local.sampler import (
    next_chunk,
    record_chunk,
    sample_generator,
    take_tokens,
    token_logprob,
)
from continual_lsp.policy.local.speculate import Lookup, grammar_draft


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
        decodes). The entry is a copy of the prompt's positions only (`PromptCache.store`).
        """
        prompt_cache, prompt_tokens, weights_key = self.prompt
        if prompt_cache is not None:
            prompt_cache.store(prompt_tokens, self.cache, weights_key)

    def _forward(self, tokens: list[int], keep: int) -> torch.Tensor:
        logits, self.cache = forward(self.model, tokens, self.cache, keep, self.cache_keyword)
        return logits.float()

    def feed(self, tokens: list[int]) -> torch.Tensor:
        """Append `tokens`; return logits predicting tokens[1:] and the next token."""
        return self._forward(tokens, keep=len(tokens))

    def can_drop(self) -> bool:
        """The cache can lose its last positions (`drop`): not one with a sliding window."""
        return cache_layers(self.cache) is not None

    def drop(self, count: int) -> None:
        """Forget the last `count` fed tokens (a draft's rejected tail)."""
        if count > 0:
            self.cache.crop(-count)


@dataclass(kw_only=True)
class CallState:
    """One call being decoded: its grammar state, what it has decoded, the chunk to feed
    next and the draft after it. Every decode path (one call, a batch of users, a tree of
    candidates) steps it the same way, so a call is the same whichever path decoded it.
    """

    matcher: llguidance.LLMatcher
    limit: int
    eos: set[int]
    temperature: float
    generator: torch.Generator | None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    forced: int = 0
    lookup: Lookup | None = None  # prompt-lookup drafts (speculate.py); None: none
    draft: int = 0  # the most draft tokens fed after a chunk
    next_logits: torch.Tensor = field(default_factory=lambda: torch.empty(0))
    pending: list[int] = field(default_factory=list)  # the chunk to feed; [] = done
    guess: list[int] = field(default_factory=list)  # the draft fed after it

    def start(self, next_logits: torch.Tensor) -> None:
        """Choose the first chunk from the prefill's last logits."""
        self.next_logits = next_logits
        self.pending = self._chunk(next_logits)
        self.guess = self._drafted()

    def branch(self, temperature: float) -> CallState:
        """A call from the same point that decodes on its own at `temperature` (one
        candidate of a tree): its own matcher, lists and lookup; the generator shared."""
        return replace(
            self,
            matcher=self.matcher.deep_copy(),
            temperature=temperature,
            tokens=list(self.tokens),
            logprobs=list(self.logprobs),
            lookup=self.lookup.fork() if self.lookup else None,
            pending=[],
            guess=[],
        )

    def fed(self) -> list[int]:
        """What the next pass feeds for this call: the chunk, then the draft."""
        return self.pending + self.guess

    def take(self, logits: torch.Tensor) -> int:
        """After `fed()` went through the model (`logits`: a row per fed token): record
        the chunk and what the sampler keeps of the draft, and choose the next chunk.
        Returns how many fed tokens the K/V must forget (the draft's rejected tail)."""
        chunk, guess = self.pending, self.guess
        record_chunk(chunk, self.next_logits, logits, self.tokens, self.logprobs)
        rows = logits[len(chunk) - 1 :]  # rows[j] predicts guess[j]; the last, what follows
        kept = self._walk(rows, guess)
        self.next_logits = rows[kept]
        self.guess = self._drafted()
        return len(guess) - kept

    def _walk(self, rows: torch.Tensor, guess: list[int]) -> int:
        """Keep the fed draft's tokens while the sampler would have chosen them (each one
        kept goes to `tokens` / `logprobs` as a fed chunk's do); the first it does not
        keep starts `pending`. Returns how many were kept."""
        kept = 0
        while kept < len(guess):
            chunk = self._chunk(rows[kept], guess[kept])
            if chunk[:1] != guess[kept : kept + 1]:
                self.pending = chunk  # another token, or the call has ended
                return kept
            self.tokens.append(chunk[0])
            self.logprobs.append(token_logprob(rows[kept], chunk[0]))
            kept += 1
            rest = chunk[1:]  # what the grammar forces after it, consumed by the matcher
            while rest and kept < len(guess) and rest[0] == guess[kept]:
                self.tokens.append(rest[0])
                self.logprobs.append(token_logprob(rows[kept], rest.pop(0)))
                kept += 1
            if rest:
                self.pending = rest
                return kept
        self.pending = self._chunk(rows[kept])
        return kept

    def _chunk(self, logits: torch.Tensor, draft: int | None = None) -> list[int]:
        """`next_chunk` from `logits` (a fed `draft` token there: see `choose_token`)."""
        chunk, forced = next_chunk(
            self.matcher, logits, self.tokens, self.logprobs, self.limit, self.eos,
            self.temperature, self.generator, draft,
        )  # fmt: skip
        self.forced += forced
        return chunk

    def _drafted(self) -> list[int]:
        if self.lookup is None or not self.pending:
            return []
        room = min(self.draft, self.limit - len(self.tokens) - len(self.pending))
        return grammar_draft(self.lookup, self.matcher, self.tokens + self.pending, room)


def call_fields(
    grammar: ToolCallGrammar, prompt_tokens: list[int], params: SampleParams, draft: int
) -> tuple[list[int], dict[str, Any]]:
    """The grammar's forced opening (`{"tool":"`, before anything is sampled) and the
    `CallState` fields of a call that starts after it, its log-probs still to come from
    the pass that feeds it (`opening_logprobs`)."""
    if not prompt_tokens:
        raise ValueError("constrained_decode needs a non-empty prompt")
    matcher = grammar.matcher()
    limit = max(0, params.max_tokens)
    opening = take_tokens(matcher.compute_ff_tokens(), limit)
    if opening:
        matcher.consume_tokens(opening)
    return opening, {
        "matcher": matcher,
        "limit": limit,
        "eos": set(grammar.eos_tokens),
        "temperature": params.temperature,
        "generator": sample_generator(params),
        "tokens": list(opening),
        "logprobs": [],
        "forced": len(opening),
        "lookup": Lookup(prompt_tokens) if draft > 0 else None,
        "draft": draft,
    }


def opened(
    model: Any,
    grammar: ToolCallGrammar,
    prompt_tokens: list[int],
    params: SampleParams,
    prompt_cache: PromptCache | None,
    weights_key: Any,
    draft: int,
) -> tuple[Decoder, dict[str, Any]]:
    """Prefill the prompt and the grammar's forced opening in one pass, past what the
    prompt cache holds: the `Decoder`, and the `CallState` fields of a call that starts
    there."""
    opening, fields = call_fields(grammar, prompt_tokens, params, draft)
    decoder = Decoder(model, prompt_tokens, opening, prompt_cache, weights_key)
    fields["logprobs"] = opening_logprobs(decoder.opening_logits, opening)
    return decoder, fields


def opening_logprobs(logits: torch.Tensor, opening: list[int]) -> list[float]:
    """Log-probs of the forced `opening` from the logits that predict it (a row each)."""
    if not opening:
        return []
    rows = torch.log_softmax(logits, dim=-1)
    picked = torch.tensor(opening, dtype=torch.long, device=rows.device)
    return rows.gather(1, picked[:, None])[:, 0].tolist()


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
    *,
    draft: int = 0,
) -> Completion:
    """Sample one tool call under the grammar; see the module docstring for logprobs.
    `draft`: up to this many prompt-lookup tokens ride along with each chunk (speculate.py).

    Stops at the end-of-turn token (recorded as the last completion token, as in
    `Renderer.render_call`), at `params.max_tokens`, or when the matcher errors. An
    unfinished call is returned as is: the caller's `parse_call` fails and it resamples.
    With a `prompt_cache`, the prompt prefix it shares with the previous prompt is not
    recomputed; `weights_key` identifies the current weights (a mismatch drops the cache).
    """
    start = time.perf_counter()
    with torch.inference_mode():
        decoder, fields = opened(
            model, grammar, prompt_tokens, params, prompt_cache, weights_key, draft
        )
        call = CallState(**fields)
        if not decoder.can_drop():
            call.lookup = None  # a sliding-window cache cannot forget a rejected draft
        call.start(decoder.next_logits)
        while call.pending:
            decoder.drop(call.take(decoder.feed(call.fed())))
        decoder.keep_prompt()

    return Completion(
        tokens=call.tokens,
        logprobs=call.logprobs,
        text=completion_text(grammar, call.tokens, call.eos),
        forced=call.forced,
        seconds=time.perf_counter() - start,
    )
