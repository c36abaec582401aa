"""Lane test fixtures: the MiniLM embedder is loaded once per session (about 5 s)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session", autouse=True)
def _no_xai() -> Iterator[None]:
    # The lanes must never reach a remote service in tests unless a test asks for it;
    # the variable is restored afterwards so other parts' tests are not affected.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CONTINUAL_LSP_XAI_DISABLE", "1")
        yield


@pytest.fixture(scope="session")
def embedder() -> Any:
    from continual_lsp.lanes.embed import get_embedder

    emb = get_embedder()
    emb.embed(["warm up"])
    return emb
