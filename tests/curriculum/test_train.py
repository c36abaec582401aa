"""The starter recipe can start from an exported adapter (scripts/train_starter.sh with
INIT_ADAPTER): the weights it starts from are the adapter's, and a wrong shape is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from continual_lsp.curriculum.train import TrainConfig, build_model, export, load_adapter
from continual_lsp.policy.model_files import STARTER_DIR

pytestmark = pytest.mark.model


def test_training_can_start_from_the_shipped_adapter(tmp_path: Path) -> None:
    model = build_model(TrainConfig(data=[], out=str(tmp_path)))
    fresh = {k: v.clone() for k, v in model.state_dict().items() if "lora_B" in k}
    assert all(float(v.abs().sum()) == 0 for v in fresh.values())  # a fresh LoRA B is 0
    load_adapter(model, STARTER_DIR)
    shipped = load_file(str(STARTER_DIR / "adapter_model.safetensors"))
    ours = {k.replace(".default", ""): v for k, v in model.state_dict().items() if "lora_" in k}
    assert set(ours) == set(shipped)
    assert all(torch.equal(ours[k], v.to(torch.float32)) for k, v in shipped.items())
    # Exported again, it is the same adapter (bf16 both ways).
    export(model, tmp_path / "again")
    again = load_file(str(tmp_path / "again" / "adapter_model.safetensors"))
    assert all(torch.equal(again[k], v) for k, v in shipped.items())

    wrong = tmp_path / "rank4"
    wrong.mkdir()
    cfg = json.loads((STARTER_DIR / "adapter_config.json").read_text())
    (wrong / "adapter_config.json").write_text(json.dumps({**cfg, "r": 4}))
    small = {k: (v[:4] if "lora_A" in k else v[:, :4]).contiguous() for k, v in shipped.items()}
    from safetensors.torch import save_file

    save_file(small, str(wrong / "adapter_model.safetensors"))
    with pytest.raises((ValueError, RuntimeError)):
        load_adapter(model, wrong)
