"""Tinker adapter versions: checkpoints on the service, recorded beside the local adapters.

`save_adapter` saves the resumable state and the sampler weights remotely and records both
paths in `adapters_dir/tinker-adapters.json`; `load_adapter` switches to a version;
`download_adapter` exports one as a PEFT directory (`to_peft_adapter`) for the local backend.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from continual_lsp.policy.base import AdapterInfo
from continual_lsp.policy.tinker.service import TinkerSession

INDEX_FILE = "tinker-adapters.json"  # adapter name → tinker:// paths, beside local adapters


def to_peft_adapter(
    source: str | Path, target: str | Path, base_model: str, *, lora_alpha: float | None = None
) -> Path:
    """Convert a Tinker LoRA export (dense models) into a PEFT adapter directory.

    Tinker exports `adapter_model.safetensors` + `adapter_config.json` with PEFT-style keys
    (`base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight`), except the unembedding,
    exported as `model.unembed_tokens` (→ `lm_head`). MoE expert weights need per-family
    expansion: use `tinker_cookbook.weights.build_lora_adapter` for those.

    `lora_alpha`: rescale `lora_B` so the adapter computes the same update under this alpha
    (LocalPolicy builds its LoRA with `lora_alpha = 2·rank` and keeps its own config when it
    loads weights). None keeps the export's alpha.
    """
    import torch
    from safetensors.torch import load_file, save_file

    source, target = Path(source), Path(target)
    config = json.loads((source / "adapter_config.json").read_text())
    weights = load_file(str(source / "adapter_model.safetensors"))
    rank = int(config["r"])
    alpha = float(config.get("lora_alpha", rank))
    if any(".experts" in k for k in weights):
        raise ValueError(
            "this adapter has MoE expert weights; convert it with "
            "tinker_cookbook.weights.build_lora_adapter (see docs/tinker.md)"
        )
    scale = 1.0 if lora_alpha is None else alpha / float(lora_alpha)
    out: dict[str, torch.Tensor] = {}
    modules: set[str] = set()
    for key, tensor in weights.items():
        new_key = key.replace("model.unembed_tokens", "lm_head")
        if not new_key.startswith("base_model.model."):
            new_key = "base_model.model." + new_key
        if ".lora_B." in new_key and scale != 1.0:
            tensor = tensor * scale
        out[new_key] = tensor.contiguous()
        module = new_key.split(".lora_", 1)[0].rsplit(".", 1)[-1]
        modules.add(module)
    peft_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": rank,
        "lora_alpha": alpha if lora_alpha is None else lora_alpha,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "target_modules": sorted(modules),
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".partial-"))
    try:
        save_file(out, str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})
        (tmp / "adapter_config.json").write_text(json.dumps(peft_config, indent=1, sort_keys=True))
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


class TinkerCheckpoints(TinkerSession):
    """Adapter versions of a Tinker policy: saved, switched to and downloaded."""

    steps: int

    def _index_path(self) -> Path:
        if self.adapters_dir is None:
            raise ValueError("TinkerPolicy needs adapters_dir to record adapter versions")
        return self.adapters_dir / INDEX_FILE

    def _read_index(self) -> dict[str, dict[str, Any]]:
        path = self._index_path()
        if not path.is_file():
            return {}
        data: dict[str, dict[str, Any]] = json.loads(path.read_text())
        return data

    def _write_index(self, index: dict[str, dict[str, Any]]) -> None:
        path = self._index_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(index, indent=1, sort_keys=True))
        os.replace(tmp, path)

    def save_adapter(self, name: str) -> AdapterInfo:
        """Save the weights and optimizer state as version `name` on Tinker.

        `save_state` (resumable, optimizer included) and sampler weights are saved remotely;
        the local record `adapters_dir/tinker-adapters.json` maps `name` to both paths.
        `AdapterInfo.path` is the `tinker://` state path and `sha256` fingerprints the
        record (the bytes live remotely; `download_adapter` fetches them).
        """
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad adapter name {name!r}")
        self._require()
        with self._lock:
            index = self._read_index()
            if name in index:
                raise FileExistsError(f"adapter version {name} already exists")

            trainer = self._ensure_training()

            def save() -> tuple[str, str]:
                state_future = trainer.save_state(name)
                sampler_future = trainer.save_weights_for_sampler(name)
                return (
                    state_future.result(timeout=self.request_timeout_s).path,
                    sampler_future.result(timeout=self.request_timeout_s).path,
                )

            state_path, sampler_path = self._call(save, "saving the adapter")
            record = {
                "state": state_path,
                "sampler": sampler_path,
                "base_model": self.model_name,
                "rank": self.rank,
                "steps": self.steps,
            }
            index[name] = record
            self._write_index(index)
            self._adapter_version = name
        digest = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
        return AdapterInfo(name=name, path=state_path, sha256=digest)

    def _resolve(self, name: str) -> tuple[str | None, dict[str, Any]]:
        """(version name, index record) for a version name or a `tinker://` path."""
        if name.startswith("tinker://"):
            index = self._read_index() if self.adapters_dir is not None else {}
            for version, record in index.items():
                if name in (record.get("state"), record.get("sampler")):
                    return version, record
            if "/sampler_weights/" in name:
                return None, {"state": None, "sampler": name}
            return None, {"state": name, "sampler": None}
        index = self._read_index()
        if name not in index:
            raise FileNotFoundError(f"no Tinker adapter version {name!r} in {self._index_path()}")
        return name, index[name]

    def load_adapter(self, name: str) -> None:
        """Switch to version `name`, a `tinker://` path (as `AdapterInfo.path` gives), or
        `""` for the base weights.

        Sampling moves to the version's sampler weights at once. Training resumes from its
        saved state, weights and Adam moments, when the next step needs a training client
        (`create_training_client_from_state_with_optimizer`); a process that only samples
        never pays for one.
        """
        self._require()
        if not name:
            with self._lock:
                self._sampling = self._reference  # a fresh LoRA adapter is the base model
                self._training = None
                self._resume_state = None
                self._adapter_version = None
            return
        version, record = self._resolve(name)

        def load() -> Any:
            if record.get("sampler"):
                return self._service.create_sampling_client(model_path=record["sampler"]).result(
                    timeout=self.request_timeout_s
                )
            return None

        with self._lock:
            sampling = self._call(load, "loading the adapter")
            if record.get("state"):
                self._training = None
                self._resume_state = record["state"]
            if sampling is None:  # a bare state path: publish its weights for sampling
                trainer = self._ensure_training()
                sampling = self._call(
                    lambda: trainer.save_weights_and_get_sampling_client().result(
                        timeout=self.request_timeout_s
                    ),
                    "loading the adapter",
                )
            self._sampling = sampling
            self._adapter_version = version

    def download_adapter(
        self, name: str | None, target: str | Path, *, lora_alpha: float | None = None
    ) -> Path:
        """Fetch an adapter as a PEFT directory (adapter_config.json + safetensors).

        `name`: a saved version, or None for the current weights. The weights are exported
        with `save_weights_external` (one hour TTL), downloaded from the signed URLs the
        RestClient gives, then converted by `to_peft_adapter` (`lora_alpha=2·rank` makes
        them load into LocalPolicy unchanged). The local backend can then use them offline
        with the same base model given as a local `model=` directory.
        """
        import tinker

        self._require()
        target = Path(target)
        if target.exists():
            raise FileExistsError(f"{target} already exists")

        current = self._ensure_training() if name is None or name == self._adapter_version else None

        def export() -> str:
            training = current
            if training is None:  # an older version: load it into a temporary training run
                training = self._service.create_training_client_from_state(
                    self._resolve(name)[1]["state"]
                ).result(timeout=self.request_timeout_s)
            label = f"{name or 'current'}-export-{int(time.time())}"
            saved = training.save_weights_external(label, ttl_seconds=3600).result(
                timeout=self.request_timeout_s
            )
            return str(saved.path)

        path = self._call(export, "exporting the adapter")
        rest = tinker.RestClient(base_url=self.base_url, api_key=self.api_key)
        urls = self._call(
            lambda: (
                rest.get_external_weights_urls(path).result(timeout=self.request_timeout_s).urls
            ),
            "fetching download links",
        )
        with tempfile.TemporaryDirectory(prefix="tinker-adapter-") as tmp:
            for relative, url in urls.items():
                local = (Path(tmp) / relative).resolve()
                if Path(tmp).resolve() not in local.parents:
                    raise ValueError(f"unsafe path in the export: {relative!r}")
                local.parent.mkdir(parents=True, exist_ok=True)
                self._call(
                    lambda url=url, local=local: urllib.request.urlretrieve(url, str(local)),
                    f"downloading {relative}",
                )
            return to_peft_adapter(tmp, target, self.model_name, lora_alpha=lora_alpha)
