"""Settings: sources in order, and the workspace allow-list a shared server relies on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from continual_lsp.config import Settings


def test_env_overrides_file_and_flags_override_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "continual.toml"
    config.write_text('learning_rate = 0.002\nuser = "from-file"\n')
    monkeypatch.setenv("CONTINUAL_LSP_USER", "from-env")
    settings = Settings.load(config, kl_coef=0.2)
    assert (settings.learning_rate, settings.user, settings.kl_coef) == (0.002, "from-env", 0.2)
    with pytest.raises(ValidationError):
        Settings.load(config, not_a_setting=1)


def test_workspace_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    allowed, other = tmp_path / "projects", tmp_path / "home"
    (allowed / "app").mkdir(parents=True)
    other.mkdir()
    (allowed / "escape").symlink_to(other)
    assert Settings().allows_workspace(other)  # no roots: any directory
    monkeypatch.setenv("CONTINUAL_LSP_WORKSPACE_ROOTS", str(allowed))  # one root, no comma
    settings = Settings.load()
    assert settings.workspace_roots == [str(allowed)]
    assert settings.allows_workspace(allowed / "app")
    assert settings.allows_workspace(allowed)
    assert not settings.allows_workspace(other)
    assert not settings.allows_workspace(allowed / "app" / ".." / "..")
    assert not settings.allows_workspace(allowed / "escape")  # a symlink out is outside
    monkeypatch.setenv("CONTINUAL_LSP_WORKSPACE_ROOTS", f"{allowed},{other}")
    assert Settings.load().allows_workspace(other)


def test_the_old_auto_approve_setting_maps_onto_autonomy() -> None:
    assert Settings(auto_approve_read_only=False).autonomy == "manual"
    assert Settings(auto_approve_read_only=True).autonomy == "allow_rules"
    assert Settings(auto_approve_read_only=False, autonomy="read_only").autonomy == "read_only"


def test_configuration_page_is_generated_from_settings() -> None:
    """docs/configuration.md is what scripts/settings_doc.py writes from config.py, and every
    setting has a meaning there (a field without a comment fails)."""
    root = Path(__file__).resolve().parent.parent
    check = subprocess.run(
        [sys.executable, "scripts/settings_doc.py", "--check"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    page = (root / "docs" / "configuration.md").read_text(encoding="utf-8")
    for name in Settings.model_fields:
        row = next(line for line in page.splitlines() if line.startswith(f"| `{name}` |"))
        assert not row.endswith("|  |"), f"{name} has no meaning in config.py"
