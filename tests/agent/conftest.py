"""The agent tests' real embedded policy (training off: tests/learning covers the step)."""

from __future__ import annotations

from typing import Any

import pytest

from continual_lsp.config import Settings


@pytest.fixture(scope="module")
def policy(model_and_tokenizer: tuple[Any, Any]) -> Any:
    from continual_lsp.policy.local.local_policy import LocalPolicy

    return LocalPolicy(Settings(enable_training=False), model_and_tokenizer)
