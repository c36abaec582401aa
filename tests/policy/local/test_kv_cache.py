"""The KV-cache helpers: what the prompt cache keeps and finds."""

from __future__ import annotations

from continual_lsp.policy.local.kv_cache import PromptCache, common_prefix


def _kv(tokens: list[int]) -> object:
    """A two-layer DynamicCache for `tokens`: key and value of position p hold p."""
    import torch
    from transformers import DynamicCache

    positions = torch.arange(len(tokens), dtype=torch.float32)[None, None, :, None]
    layer = (positions.expand(1, 2, -1, 4).clone(), positions.expand(1, 2, -1, 4).clone())
    return DynamicCache(ddp_cache_data=[layer, tuple(t.clone() for t in layer)])


def test_prompt_cache_drops_an_entry_the_newer_one_mostly_covers() -> None:
    """Two prompts that share a long prefix (one user's tasks after one system prompt)
    keep one copy of that prefix's K/V; two that share little keep both."""
    cache = PromptCache()
    system = list(range(100, 124))
    first, second = [*system, 1, 2, 3, 4], [*system, 5, 6]
    cache.store(first, _kv(first), key="w")
    cache.store(second, _kv(second), key="w")
    assert [tokens for tokens, _, _ in cache.entries] == [second]
    # The first prompt still finds its shared prefix in the newer entry.
    shared, kv = cache.lookup([*first, 9], key="w")
    assert shared == len(system)
    assert kv.layers[0].keys.shape[-2] == len(system)
    other = [7, 8, *system]  # shares nothing from the start: both are kept
    cache.store(other, _kv(other), key="w")
    assert [tokens for tokens, _, _ in cache.entries] == [other, second]
    # An entry at most half covered by the newer one stays too.
    cache.clear()
    cache.store(second, _kv(second), key="w")
    half = [*system[:13], *range(500, 513)]  # 13 of second's 26 tokens
    cache.store(half, _kv(half), key="w")
    assert [tokens for tokens, _, _ in cache.entries] == [half, second]


def test_common_prefix_counts_the_shared_start() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix((1, 2), (1, 2)) == 2
    assert common_prefix([], [1]) == 0


def test_an_entry_is_a_copy_of_the_prompts_positions_only() -> None:
    """A cache handed in runs past the prompt (the decoded call, a batch row's room): the
    entry keeps the prompt's positions, in tensors of its own, and the same values."""
    cache = PromptCache()
    prompt, decoded = [1, 2, 3, 4, 5, 6], [7, 8, 9]
    kv = _kv(prompt + decoded)
    cache.store(prompt, kv, key="w")
    (_, layers, _) = cache.entries[0]
    for (keys, values), layer in zip(layers, kv.layers, strict=True):
        assert keys.shape[-2] == values.shape[-2] == len(prompt)
        assert keys.untyped_storage().nbytes() == keys.numel() * keys.element_size()
        assert keys.untyped_storage().data_ptr() != layer.keys.untyped_storage().data_ptr()
        assert keys.equal(layer.keys[:, :, : len(prompt)])
