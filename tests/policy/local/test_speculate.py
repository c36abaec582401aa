"""Prompt-lookup drafts (speculate.py): what is drafted, and that the sampler's rule for a
drafted token leaves every token's probability as it was."""

from __future__ import annotations

import collections

import torch

from continual_lsp.policy.local.sampler import choose_token
from continual_lsp.policy.local.speculate import Lookup


def test_the_draft_is_what_followed_the_latest_earlier_occurrence() -> None:
    prompt = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8]
    lookup = Lookup(prompt)
    # The call so far ends in 1 2 3: the latest earlier 1 2 3 was followed by 7 8.
    assert lookup.draft([1, 2, 3], room=4) == [7, 8, 1, 2]
    assert lookup.draft([1, 2, 3], room=1) == [7]
    assert lookup.draft([1, 2, 3], room=0) == []


def test_a_two_token_match_drafts_when_no_three_token_one_does() -> None:
    lookup = Lookup([5, 6, 40, 41, 42])
    assert lookup.draft([7, 5, 6], room=8) == [40, 41, 42, 7, 5, 6]
    assert Lookup([5, 6, 40]).draft([99, 98], room=8) == []


def test_a_fork_grows_on_its_own() -> None:
    lookup = Lookup([1, 2, 3, 4])
    twin = lookup.fork()
    assert twin.draft([8, 9], room=2) == []
    assert lookup.draft([1, 2], room=2) == [3, 4]
    assert twin.draft([8, 9, 1, 2], room=2) == [3, 4]
    assert twin.draft([8, 9, 1, 2, 8, 9], room=2) == [1, 2]  # 2 8 9 is new; 8 9 is not
    assert lookup.sequence == [1, 2, 3, 4, 1, 2]


def test_greedy_ignores_the_draft() -> None:
    logits = torch.tensor([0.0, 3.0, 1.0])
    mask = torch.tensor([True, True, True])
    assert choose_token(logits, mask, 0.0, None, draft=2) == 1
    assert choose_token(logits, mask.logical_and(torch.tensor([1, 0, 1]).bool()), 0.0, None, 1) == 2


def test_a_drafted_token_keeps_every_tokens_probability() -> None:
    """Drawn 20,000 times with token 1 drafted, each token comes out as often as the
    masked, tempered softmax says (a forbidden draft is never kept)."""
    logits = torch.tensor([0.5, 1.5, 0.0, 2.0])
    mask = torch.tensor([True, True, True, False])
    temperature = 0.8
    want = torch.softmax(logits.masked_fill(~mask, float("-inf")) / temperature, dim=-1)
    generator = torch.Generator().manual_seed(3)
    draws = 20_000
    for draft in (1, 3):
        seen = collections.Counter(
            choose_token(logits, mask, temperature, generator, draft) for _ in range(draws)
        )
        for token in range(4):
            assert abs(seen[token] / draws - float(want[token])) < 0.015, (draft, token, seen)
        assert seen[3] == 0
