"""Lane test fixtures: the MiniLM embedder is loaded once per session (about 5 s)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def embedder() -> Any:
    from continual_lsp.lanes.embed import get_embedder

    emb = get_embedder()
    emb.embed(["warm up"])
    return emb
