"""The tool-call grammar: the decodable schema (call_schema.py) compiled by llguidance.

The 135M embedded model writes 0/25 valid calls unconstrained (FIELD-NOTES), so every
token is sampled under a grammar compiled from the tool-call schema: the key `tool`, its
name, then that tool's argument schema with bounded strings. Decoding under it:
decode.py and candidate_tree.py.
"""

from __future__ import annotations

from typing import Any

import llguidance
import llguidance.hf
import numpy as np
import torch

from continual_lsp.policy.call_schema import decoding_schema

JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False}


class ToolCallGrammar:
    """The compiled grammar and llguidance's view of the tokenizer.

    Building the llguidance tokenizer takes ~0.5 s: pass `ll_tokenizer` from another
    grammar to share it (one grammar per allowed-tools set).
    """

    def __init__(
        self,
        tokenizer: Any,
        schema: dict[str, Any] | None = None,
        ll_tokenizer: llguidance.LLTokenizer | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.ll_tokenizer = ll_tokenizer or llguidance.hf.from_tokenizer(tokenizer)
        self.grammar = llguidance.LLMatcher.grammar_from_json_schema(
            schema if schema is not None else decoding_schema(), defaults=JSON_OPTIONS
        )
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
            self.grammar, self.ll_tokenizer
        )
        if is_error:
            raise ValueError(f"tool-call grammar does not compile: {'; '.join(messages)}")
        self.vocab_size: int = self.ll_tokenizer.vocab_size
        self.eos_tokens: list[int] = list(self.ll_tokenizer.eos_tokens)

    def matcher(self) -> llguidance.LLMatcher:
        return llguidance.LLMatcher(self.ll_tokenizer, self.grammar, log_level=0)

    def accepted_prefix(self, tokens: list[int]) -> int:
        """How many of `tokens` the grammar accepts from the start (tests, diagnostics)."""
        return int(self.matcher().validate_tokens(tokens))

    def accepts(self, tokens: list[int]) -> bool:
        """True when `tokens` is a complete call followed by the end-of-turn token."""
        if not tokens or tokens[-1] not in self.eos_tokens:
            return False
        matcher = self.matcher()
        # The matcher stops as soon as the JSON is closed; the end-of-turn token must still
        # be consumable then (it is what ends the assistant turn in training data).
        return bool(
            matcher.consume_tokens(tokens) and matcher.is_stopped() and not matcher.is_error()
        )


def allowed_mask(matcher: llguidance.LLMatcher, vocab_size: int) -> torch.Tensor:
    """Boolean tensor over the model's vocabulary: True where the grammar allows a token."""
    bits = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
    allowed = np.unpackbits(bits, bitorder="little")
    mask = torch.zeros(vocab_size, dtype=torch.bool)
    n = min(vocab_size, allowed.shape[0])
    mask[:n] = torch.from_numpy(allowed[:n].astype(bool))
    return mask
