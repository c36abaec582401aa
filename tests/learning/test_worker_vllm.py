"""The training worker with `backend = "vllm"`: vLLM only samples, so the worker builds
its policy from the trainer's settings (`vllm_trainer`), never a second sampler."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from continual_lsp.config import Settings
from continual_lsp.learning import worker
from continual_lsp.policy import factory
from continual_lsp.store import Store


class _Trainer:
    adapter_version: str | None = None
    manages_versions = False


@pytest.mark.parametrize(
    ("backend", "trainer", "built"),
    [("vllm", "local", "local"), ("vllm", "tinker", "tinker"), ("local", "tinker", "local")],
)
def test_the_worker_trains_on_the_trainer_backend(
    backend: str, trainer: str, built: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[Settings] = []

    def make_policy(settings: Settings) -> Any:
        asked.append(settings)
        return _Trainer()

    monkeypatch.setattr(factory, "make_policy", make_policy)
    store = Store(tmp_path / "store.sqlite3")
    settings = Settings(backend=backend, vllm_trainer=trainer)  # type: ignore[arg-type]
    assert isinstance(worker._load_policy(settings, store), _Trainer)
    assert [s.backend for s in asked] == [built]
    assert asked[0].model == settings.model and asked[0].user == settings.user
    store.close()
