"""transformers' names for the KV cache across versions: one copy, for every local forward
(local/kv_cache.py) and the sample-dtype measurement (model_files.py)."""

from __future__ import annotations

import inspect
from typing import Any


def cache_keyword(model: Any) -> str:
    """Name of the KV-cache argument: transformers 5.2x renamed `past_key_values` to `cache`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(base.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def returned_cache(out: Any) -> Any:
    """The cache a forward pass returned, under either of transformers' names for it."""
    grown = getattr(out, "cache", None)
    return grown if grown is not None else out.past_key_values
