"""Shared fixtures. The embedded model is loaded once per test session (it is the slow part)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
SAMPLE_WORKSPACE = REPO / "examples" / "sample-workspace"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A fresh copy of the sample workspace."""
    target = tmp_path / "ws"
    shutil.copytree(SAMPLE_WORKSPACE, target)
    return target


@pytest.fixture(scope="session")
def model_and_tokenizer() -> tuple[Any, Any]:
    """The embedded base model and its tokenizer, loaded once; treat as read-only."""
    import torch

    from continual_lsp.config import EMBEDDED_MODEL
    from continual_lsp.policy.model_files import load_model_and_tokenizer

    torch.manual_seed(0)
    return load_model_and_tokenizer(EMBEDDED_MODEL)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Any]:
    from continual_lsp.store import Store

    s = Store(tmp_path / "store.sqlite3")
    yield s
    s.close()


@pytest.fixture(scope="session")
def embedded_tokenizer() -> Any:
    """The embedded model's tokenizer alone (no weights); skips if the model is missing."""
    from continual_lsp.config import EMBEDDED_MODEL
    from continual_lsp.policy.model_files import ModelNotFoundError, load_tokenizer

    try:
        return load_tokenizer(EMBEDDED_MODEL)
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def chatml_renderer(embedded_tokenizer: Any) -> Any:
    """The embedded model's chat template as a Tinker-style renderer."""
    from continual_lsp.policy.tinker.tinker_render import ChatTemplateRenderer

    return ChatTemplateRenderer(embedded_tokenizer)


@pytest.fixture(scope="session")
def embedder() -> Any:
    """The MiniLM embedder, loaded once per session (about 5 s): lanes and consolidation."""
    from continual_lsp.lanes.routing.embed import get_embedder

    emb = get_embedder()
    emb.embed(["warm up"])
    return emb
