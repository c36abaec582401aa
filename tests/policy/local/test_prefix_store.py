"""The prompt start's K/V on disk (prefix_store.py): kept by weights, read back whole,
never trusted past what it says it holds."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch

from continual_lsp.policy.local.prefix_store import PrefixStore, weights_digest

TOKENS = [1, 2, 3, 4, 5]


def _layers(n: int = 5, layers: int = 3, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    # a decode buffer runs past the prompt: only the prompt's positions are kept
    return [(torch.randn(1, 2, n + 4, 8, generator=g), torch.randn(1, 2, n + 4, 8, generator=g))
            for _ in range(layers)]  # fmt: skip


def test_an_entry_reads_back_as_the_prompts_positions(tmp_path: Path) -> None:
    store = PrefixStore(tmp_path, 1 << 20)
    layers = _layers()
    store.save("abc", TOKENS, layers)
    assert store.holds("abc", TOKENS) and not store.holds("abd", TOKENS)
    assert not store.holds("abc", TOKENS[:-1])  # another prompt: another entry
    back = store.load("abc", TOKENS)
    assert back is not None and len(back) == 3
    for (k, v), (k2, v2) in zip(layers, back, strict=True):
        assert torch.equal(k[:, :, :5], k2) and torch.equal(v[:, :, :5], v2)
    assert store.load("abd", TOKENS) is None


def test_other_tokens_are_not_served(tmp_path: Path) -> None:
    """A prompt that changed (a new version of the product) under the same weights."""
    store = PrefixStore(tmp_path, 1 << 20)
    store.save("abc", TOKENS, _layers())
    assert store.load("abc", [*TOKENS[:-1], 9]) is None
    assert store.load("abc", TOKENS[:-1]) is None


def test_an_unreadable_entry_is_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = PrefixStore(tmp_path, 1 << 20)
    store.save("abc", TOKENS, _layers())
    (file,) = tmp_path.glob("*.safetensors")
    file.write_bytes(file.read_bytes()[:200])
    with caplog.at_level(logging.WARNING):
        assert store.load("abc", TOKENS) is None
    assert "unreadable prompt prefix" in caplog.text


def test_the_least_recently_used_go_past_the_bound(tmp_path: Path) -> None:
    size = len(TOKENS) * 2 * 3 * 2 * 8 * 4  # float32 K and V of 3 layers, 2 heads, dim 8
    store = PrefixStore(tmp_path, 2 * size + 2000)  # two entries and their headers
    store.save("a", TOKENS, _layers(seed=1))
    store.save("b", TOKENS, _layers(seed=2))
    os.utime(store._file("a", TOKENS), (1, 1))
    os.utime(store._file("b", TOKENS), (2, 2))
    assert store.load("a", TOKENS) is not None  # used: now the newest
    store.save("c", TOKENS, _layers(seed=3))
    assert [store.holds(d, TOKENS) for d in "abc"] == [True, False, True]


def test_a_bound_of_zero_keeps_nothing(tmp_path: Path) -> None:
    store = PrefixStore(tmp_path / "off", 0)
    store.save("abc", TOKENS, _layers())
    assert not (tmp_path / "off").exists()
    assert store.load("abc", TOKENS) is None


def test_the_digest_names_the_weights_not_their_order() -> None:
    a, b = torch.ones(2, 3), torch.zeros(3)
    digest = weights_digest("base", [("x", a), ("y", b)])
    assert digest == weights_digest("base", [("y", b), ("x", a.clone())])
    assert digest != weights_digest("other base", [("x", a), ("y", b)])
    bumped = a.clone()
    bumped[1, 2] += 1e-6
    assert digest != weights_digest("base", [("x", bumped), ("y", b)])
    assert digest != weights_digest("base", [("x", a.to(torch.bfloat16)), ("y", b)])
