"""The starter adapter: merged into the embedded base at load, cached by its sha256."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from continual_lsp.config import EMBEDDED_MODEL, Settings
from continual_lsp.policy import model_files
from continual_lsp.policy.model_files import ModelNotFoundError, starter_name


def test_missing_starter_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_files, "STARTER_DIR", tmp_path / "starter")
    with pytest.raises(ModelNotFoundError, match="starter = false"):
        model_files.load_model_and_tokenizer(EMBEDDED_MODEL, starter=True)
    with pytest.raises(ModelNotFoundError, match=r"train_starter\.sh"):
        starter_name(EMBEDDED_MODEL, True)


def test_starter_applies_to_the_embedded_model_only() -> None:
    assert starter_name(EMBEDDED_MODEL, False) is None
    assert starter_name("/models/other", True) is None


def test_the_shipped_starter_is_named_and_on_by_default() -> None:
    assert Settings().starter is True
    name = starter_name(EMBEDDED_MODEL, True)
    assert name is not None and name.startswith("starter-")


def _write_adapter(model_and_tokenizer: tuple[Any, Any], directory: Path, seed: int) -> None:
    """A small random LoRA adapter in peft's format (B non-zero, so it changes the model)."""
    import copy

    from peft import LoraConfig, get_peft_model

    base = copy.deepcopy(model_and_tokenizer[0])
    peft_model = get_peft_model(
        base, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "down_proj"])
    )
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.05)
    peft_model.save_pretrained(str(directory))


@pytest.mark.model
def test_merge_is_cached_by_sha(
    model_and_tokenizer: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, tokenizer = model_and_tokenizer
    starter = tmp_path / "starter"
    _write_adapter(model_and_tokenizer, starter, seed=1)
    monkeypatch.setattr(model_files, "STARTER_DIR", starter)
    # A cache of our own, with the base's bf16 copy linked in (so only the merge is new).
    real = model_files._cached_copy(model_files.embedded_gguf_path())
    monkeypatch.setenv("CONTINUAL_LSP_CACHE", str(tmp_path / "cache"))
    local = model_files._cached_copy(model_files.embedded_gguf_path())
    local.parent.mkdir(parents=True)
    local.symlink_to(real, target_is_directory=True)

    ids = torch.tensor([tokenizer.encode("def add(a, b):\n    return a + b")])
    with torch.no_grad():
        reference = base(input_ids=ids).logits
        merged, _ = model_files.load_model_and_tokenizer(EMBEDDED_MODEL, starter=True)
        first = merged(input_ids=ids).logits
    sha = model_files.starter_sha256()
    cached = local.with_name(local.name + f"-starter-{sha[:16]}")
    assert (cached / "model.safetensors").is_file()
    assert (first - reference).abs().max() > 1e-2  # the adapter changed the model

    with torch.no_grad():
        again, _ = model_files.load_model_and_tokenizer(EMBEDDED_MODEL, starter=True)
        second = again(input_ids=ids).logits
    # From the cache: the same merged model (measured max |Δlogit| ≈ 5e-3 against the
    # in-memory merge of the first load, on logits of magnitude ~20).
    assert (first - second).abs().max() < 0.05

    # Another adapter file: another cache entry, other weights.
    _write_adapter(model_and_tokenizer, starter, seed=2)
    with torch.no_grad():
        other, _ = model_files.load_model_and_tokenizer(EMBEDDED_MODEL, starter=True)
        third = other(input_ids=ids).logits
    assert model_files.starter_sha256() != sha
    assert (third - first).abs().max() > 1e-3
