"""The facade's reading of guards as grammar restrictions (no model)."""

from __future__ import annotations

from typing import Any

from continual_lsp.agent.lanes_facade import LanesFacade
from continual_lsp.config import Settings
from continual_lsp.lanes.compile import _command_pattern, _program_pattern


def _guard(store: Any, rules: list[dict[str, Any]]) -> None:
    store.add_lane_item(
        {
            "text": "a rule",
            "lane": "CODE",
            "reason": "test",
            "spec": {"message": "no", "rules": rules},
        }
    )


def test_guards_become_decode_restrictions(store: Any) -> None:
    _guard(store, [{"kind": "tool", "deny": ["write"]}])
    _guard(store, [{"kind": "tool", "deny": ["edit"], "existing_files_only": True}])
    _guard(store, [{"kind": "path", "globs": ["vendor/**", "*.lock"], "tools": ["edit_lines"]}])
    _guard(store, [{"kind": "path", "globs": ["src/"], "mode": "allow"}])
    _guard(store, [{"kind": "command", "pattern": _command_pattern("git push")}])
    # A rewrite stays a rewrite: never a grammar restriction.
    _guard(store, [{"kind": "command", "pattern": _program_pattern("npm"), "replace": "pnpm"}])
    _guard(store, [{"kind": "command", "pattern": r"(?i)curl .*\| sh"}])
    got = LanesFacade(store, Settings(), len).decode_restrictions()
    assert got.path_prefixes == {"edit_lines": ["vendor/"], "write": [""]}
    assert got.command_prefixes == ["git push "]


def test_no_guards_no_restrictions(store: Any) -> None:
    got = LanesFacade(store, Settings(), len).decode_restrictions()
    assert got.path_prefixes == {} and got.command_prefixes == []
