"""Helpers shared by the agent tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from continual_lsp.agent.agent import Agent
from continual_lsp.config import Settings


def make_agent(tmp_path: Path, workspace: Path, policy: Any, **overrides: Any) -> Agent:
    """An Agent on `workspace` with its own store, training off."""
    settings = Settings(
        enable_training=False, store_path=str(tmp_path / "store.sqlite3"), **overrides
    )
    return Agent(settings, workspace, policy=policy)
