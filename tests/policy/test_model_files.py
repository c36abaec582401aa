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


class _FakeModel:
    """What _write_cache touches of a model: its dtype moves and save_pretrained."""

    def __init__(self) -> None:
        self.config = type("Config", (), {})()
        self.dtypes: list[object] = []

    def to(self, dtype: object) -> _FakeModel:
        self.dtypes.append(dtype)
        return self

    def save_pretrained(self, path: Path) -> None:
        (Path(path) / "model.safetensors").write_bytes(b"weights")


def test_a_cache_another_process_wrote_first_is_kept_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two processes merging the same starter race to one content-keyed folder: the
    loser's copy is dropped without a warning, nothing partial is left, and its model
    is back in float32 either way."""
    import torch

    from continual_lsp.policy.model_files import _write_cache

    target = tmp_path / "SmolLM2-starter-abc"
    target.mkdir()
    (target / "model.safetensors").write_bytes(b"weights")
    (target / "tokenizer.json").write_text("{}")
    tokenizer = type("Tok", (), {"save_pretrained": lambda self, p: None})()
    lm = _FakeModel()
    with caplog.at_level("WARNING"):
        _write_cache(lm, tokenizer, target)
    assert not caplog.records
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    assert lm.dtypes[-1] == torch.float32

    # A folder in the way that is not a cache: the failed write is reported.
    (target / "model.safetensors").unlink()
    lm = _FakeModel()
    with caplog.at_level("WARNING"):
        _write_cache(lm, tokenizer, target)
    assert "could not cache the model" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    assert lm.dtypes[-1] == torch.float32


def test_the_model_cache_is_named_by_content_not_by_when_the_file_was_installed(
    tmp_path: Path,
) -> None:
    """Two installs of the same GGUF (a clone's venv, a reinstall) share one cached copy;
    a different file gets its own."""
    import os

    from continual_lsp.policy import model_files

    first, second, other = (tmp_path / n for n in ("a/m.gguf", "b/m.gguf", "c/m.gguf"))
    for path, body in ((first, b"weights"), (second, b"weights"), (other, b"others!")):
        path.parent.mkdir()
        path.write_bytes(body * 400_000)
    os.utime(second, (1, 1))
    assert model_files._cached_copy(first) == model_files._cached_copy(second)
    assert model_files._cached_copy(first) != model_files._cached_copy(other)


def test_the_minilm_copy_is_stamped_by_content(tmp_path: Path) -> None:
    """Two installs of the MiniLM package agree on the stamp, so neither re-extracts over
    the copy the other is reading (it did, once per test run of another checkout)."""
    import os
    import zipfile

    from continual_lsp.lanes.routing import embed

    zips = [tmp_path / "a.zip", tmp_path / "b.zip"]
    for i, path in enumerate(zips):
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("config.json", "{}")
        os.utime(path, (i, i))
    target = embed.extract_model(zips[0], tmp_path / "copy")
    marker = (target / ".complete").stat().st_mtime_ns
    assert embed.extract_model(zips[1], tmp_path / "copy") == target
    assert (target / ".complete").stat().st_mtime_ns == marker  # not extracted again
