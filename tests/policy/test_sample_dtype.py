"""The agents sample in `Settings.sample_dtype`; training stays in float32."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from continual_lsp.config import Settings
from continual_lsp.policy import model_files
from continual_lsp.policy.base import Message
from continual_lsp.policy.factory import make_policy, make_trainer
from continual_lsp.policy.local import model_host
from continual_lsp.policy.local.local_policy import LocalPolicy
from continual_lsp.tools.base import ToolCall


def test_auto_is_bfloat16_only_with_native_bf16_that_decodes_faster(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CONTINUAL_LSP_CACHE", str(tmp_path))
    timed: list[int] = []

    def fake_timing(threads: int) -> dict[str, float]:
        timed.append(threads)
        return {"float32": 0.71, "bfloat16": 0.79}  # the Xeon with AMX of issue 34

    monkeypatch.setattr(model_files, "time_decode", fake_timing)
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, probe, lambda: False, raising=False)
    assert model_files.resolve_dtype("auto", "cpu") == "float32"
    assert timed == []  # no native bf16: nothing to measure
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert model_files.resolve_dtype("auto", "cpu") == "float32"
    assert model_files.resolve_dtype("auto", "cpu") == "float32"
    assert len(timed) == 1  # measured once, then read from the cache
    saved = json.loads((tmp_path / "models" / model_files.DTYPE_FILE).read_text())
    (key,) = saved
    assert model_files.cpu_model() in key
    assert saved[key] == {"dtype": "float32", "seconds": {"float32": 0.71, "bfloat16": 0.79}}
    # Another CPU model (here: another key) is measured on its own; bf16 wins there.
    monkeypatch.setattr(model_files, "cpu_model", lambda: "AMD EPYC (test)")
    monkeypatch.setattr(
        model_files, "time_decode", lambda threads: {"float32": 0.46, "bfloat16": 0.42}
    )
    assert model_files.resolve_dtype("auto", "cpu") == "bfloat16"
    assert model_files.resolve_dtype("auto", "mps") == "float32"
    assert model_files.resolve_dtype("float32", "cpu") == "float32"


def test_decode_timing_covers_both_dtypes() -> None:
    seconds = model_files.time_decode(threads=1, layers=1, rounds=1)
    assert set(seconds) == {"float32", "bfloat16"}
    assert all(value > 0 for value in seconds.values())


def _dtypes(policy: LocalPolicy) -> tuple[set[torch.dtype], set[torch.dtype]]:
    """(the base weights' dtypes, the LoRA weights' dtypes)."""
    base: set[torch.dtype] = set()
    lora: set[torch.dtype] = set()
    for name, param in policy.model.named_parameters():
        (lora if "lora_" in name else base).add(param.dtype)
    return base, lora


@pytest.mark.model
def test_the_sampler_is_bf16_with_float32_adapters_and_scores_like_float32(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(model_host, "_hosts", {})  # a host of this test's own
    settings = Settings(sample_dtype="bfloat16", enable_training=False)
    sampler = make_policy(settings, shared=True)
    trainer = make_trainer(settings)
    assert isinstance(sampler, LocalPolicy) and isinstance(trainer, LocalPolicy)
    assert _dtypes(sampler) == ({torch.bfloat16}, {torch.float32})
    assert _dtypes(trainer) == ({torch.float32}, {torch.float32})

    # The same nonzero adapter in both: the reviewer's weights load into the sampler as
    # they are (float32), and its scores stay close to float32's.
    generator = torch.Generator().manual_seed(3)
    state = {
        name: 0.05 * torch.randn(param.shape, generator=generator)
        for name, param in trainer.model.named_parameters()
        if "lora_" in name
    }
    for policy in (sampler, trainer):
        with policy.exclusive(), torch.no_grad():
            for name, param in policy.model.named_parameters():
                if name in state:
                    param.copy_(state[name])
    prompt = sampler.renderer.render_prompt([Message(role="user", content="Fix calc.py")])
    call = sampler.renderer.render_call(ToolCall(tool="read", arguments={"path": "calc.py"}))
    low = torch.tensor(sampler.logprobs(prompt, call))
    full = torch.tensor(trainer.logprobs(prompt, call))
    gap = (low - full).abs().mean().item()
    assert 0 < gap < 0.05, gap  # bf16 arithmetic: not bit-equal, not far


def test_the_training_pass_is_measured_apart_from_decoding(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CONTINUAL_LSP_CACHE", str(tmp_path))
    monkeypatch.setattr(model_files, "time_decode", lambda threads: {"float32": 2, "bfloat16": 1})
    monkeypatch.setattr(model_files, "time_train", lambda threads: {"float32": 1, "bfloat16": 3})
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert model_files.resolve_dtype("auto", "cpu") == "bfloat16"
    assert model_files.resolve_dtype("auto", "cpu", "train") == "float32"
    saved = json.loads((tmp_path / "models" / model_files.DTYPE_FILE).read_text())
    assert sorted(entry["dtype"] for entry in saved.values()) == ["bfloat16", "float32"]
    assert sum(key.startswith("train | ") for key in saved) == 1


def test_training_pass_timing_covers_both_dtypes() -> None:
    seconds = model_files.time_train(threads=1, layers=1, rounds=1)
    assert set(seconds) == {"float32", "bfloat16"}
    assert all(value > 0 for value in seconds.values())
