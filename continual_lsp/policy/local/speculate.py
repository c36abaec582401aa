"""Prompt-lookup drafts: several tokens of a call decoded per forward pass (issue 30).

Much of a call copies text the prompt holds already: the path of a file in view, an
edit's `old` string (the file's own lines) and most of its `new` one, a command from the
task or an earlier turn. Each sampled token cost one forward pass over all the weights,
and on a CPU a pass that feeds 8 tokens costs little more than one that feeds 1 (the
weights are read once either way; measured on the 2-core build machine, bf16: 87 ms
against 70 ms). So after each chunk the tokens that followed the latest earlier
occurrence of the sequence's last few tokens (`Lookup`) ride along as a draft, checked
against the grammar first; a drafted token is kept while it is the token the sampler
would have chosen there (`decode.CallState.take`), and the K/V of the rest is dropped.

Nothing the caller sees changes: at temperature 0 a draft token is kept only when it is
the masked argmax; above 0 it is kept with its masked, tempered probability and, when it
is not, the token is drawn from that distribution without it (the speculative-sampling
rule for a draft that is one token for sure), so every token has exactly the
distribution it had without drafts. Log-probs are read from the same logits as before.

Why not transformers' `prompt_lookup_num_tokens`: our decode runs under a grammar mask,
records unmasked log-probs per token and batches users with an adapter per row;
`generate` does none of these.
"""

from __future__ import annotations

import llguidance

# Lookup keys, longest first: a 1-token key drafts on every common token and mostly
# wastes the pass's extra width.
NGRAMS = (3, 2)


class Lookup:
    """Where each short run of tokens last occurred in the prompt and the call so far."""

    def __init__(self, prompt: list[int]) -> None:
        self.sequence: list[int] = []
        self.prompt_length = len(prompt)
        self._next: dict[tuple[int, ...], int] = {}  # n-gram -> index of the token after
        self._extend(prompt)

    def _extend(self, tokens: list[int]) -> None:
        sequence = self.sequence
        for token in tokens:
            sequence.append(token)
            at = len(sequence) - 1
            for n in NGRAMS:
                if at >= n:
                    self._next[tuple(sequence[at - n : at])] = at

    def fork(self) -> Lookup:
        """A copy that grows on its own (one per candidate of one prompt)."""
        twin = Lookup([])
        twin.sequence = list(self.sequence)
        twin.prompt_length = self.prompt_length
        twin._next = dict(self._next)
        return twin

    def draft(self, completion: list[int], room: int) -> list[int]:
        """Up to `room` tokens that followed the latest earlier occurrence of the end of
        prompt + `completion` (which only grows between calls); [] when none did."""
        self._extend(completion[len(self.sequence) - self.prompt_length :])
        if room <= 0:
            return []
        sequence = self.sequence
        for n in NGRAMS:
            at = self._next.get(tuple(sequence[-n:])) if len(sequence) > n else None
            if at is not None:
                return sequence[at : at + room]
        return []


def grammar_draft(
    lookup: Lookup, matcher: llguidance.LLMatcher, completion: list[int], room: int
) -> list[int]:
    """`lookup`'s draft cut to the prefix the grammar accepts after `completion` (which
    `matcher` has consumed): a token the mask forbids could never be kept."""
    draft = lookup.draft(completion, room)
    if not draft or matcher.is_stopped() or matcher.is_error():
        return []
    return draft[: matcher.validate_tokens(draft)]
