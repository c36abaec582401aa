"""The one way the policy reads a tokenizer from local files (`load_tokenizer`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from continual_lsp.policy.model_files import ModelNotFoundError, load_tokenizer


def test_a_missing_local_model_is_reported_not_looked_up_on_the_hub(tmp_path: Path) -> None:
    # A path that does not resolve is the user's typo: it never falls back to the hub cache.
    with pytest.raises(ModelNotFoundError):
        load_tokenizer(str(tmp_path / "no-such-model"))
    with pytest.raises(ModelNotFoundError):
        load_tokenizer("not-a-hub-name")


def test_a_hub_name_is_read_from_the_cache_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An empty Hugging Face cache: a hub name is not downloaded, it fails.
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(OSError):
        load_tokenizer("someone/never-downloaded-model")


def test_the_embedded_tokenizer_loads_from_local_files(embedded_tokenizer: object) -> None:
    # The fixture skips where the embedded model is not installed.
    from continual_lsp.config import EMBEDDED_MODEL

    tokenizer = load_tokenizer(EMBEDDED_MODEL)
    tokens = tokenizer.encode("def f(): pass")
    assert len(tokens) > 1
    assert tokenizer.decode(tokens) == "def f(): pass"
