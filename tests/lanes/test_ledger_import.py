from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from continual_lsp.config import Settings
from continual_lsp.lanes.guards.guard_set import check_guards
from continual_lsp.lanes.reading import Situation
from continual_lsp.lanes.routing.allocator import route_correction
from continual_lsp.lanes.routing_ledger import (
    AdapterRevertNeeded,
    LedgerError,
    build_ledger,
    revert,
)
from continual_lsp.lanes.rules_import import import_rules, routing_stats, split_rules, watch_rules
from continual_lsp.protocol import LedgerResult
from continual_lsp.tools.base import ToolCall

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample-workspace" / "AGENTS.md"


def test_split_rules_drops_headings_and_fences() -> None:
    text = (
        "---\ndescription: x\n---\n# Rules\n\n- Use pnpm,\n  never npm.\n1. Second rule here.\n"
        "```bash\nnpm install\n```\nA paragraph rule that\nwraps lines.\n\n| a | b |\n## Setup:\n"
    )
    assert split_rules(text) == [
        "Use pnpm, never npm.",
        "Second rule here.",
        "A paragraph rule that wraps lines.",
    ]


def test_import_sample_agents_md(store, embedder) -> None:
    items = import_rules(store, SAMPLE, Settings())
    lanes = {i.text: i.lane for i in items}
    assert (
        lanes
        == {
            "Use pnpm, never npm.": "CODE",
            "Never edit files under vendor/.": "CODE",
            "Prefer edit_lines over rewriting a whole file with write.": "CONTEXT",  # waits for recurrence
            "The package lives in src/calc; tests are in tests/.": "CONTEXT",
        }
    )
    assert all(i.source and i.source.startswith("file:") for i in items)
    v = check_guards(store, ToolCall(tool="bash", arguments={"cmd": "npm test"}))
    assert v.action == "rewrite" and v.rewritten_call.arguments["cmd"] == "pnpm test"
    w = ToolCall(tool="edit", arguments={"path": "vendor/README.md", "old": "a", "new": "b"})
    assert check_guards(store, w).action == "block"


def test_reimport_is_idempotent_and_follows_edits(store, embedder, tmp_path) -> None:
    f = tmp_path / "AGENTS.md"
    f.write_text(SAMPLE.read_text())
    first = import_rules(store, f, Settings())
    again = import_rules(store, f, Settings())
    assert [i.id for i in first] == [i.id for i in again]
    assert len(store.lane_items()) == 4
    f.write_text(
        "# Rules\n- Use pnpm, never npm.\n- Never run `tsc` directly, use `yarn typecheck`.\n"
    )
    third = import_rules(store, f, Settings())
    assert len(third) == 2
    active = {i["text"] for i in store.lane_items(active_only=True)}
    assert active == {"Use pnpm, never npm.", "Never run `tsc` directly, use `yarn typecheck`."}


def test_watch_rules_reimports_on_change(store, embedder, tmp_path) -> None:
    f = tmp_path / "CLAUDE.md"
    f.write_text("- Use pnpm, never npm.\n")
    seen: list[Path] = []
    stop = threading.Event()
    t = threading.Thread(
        target=watch_rules, args=([f], seen.append), kwargs={"stop_event": stop}, daemon=True
    )
    t.start()
    time.sleep(0.5)
    f.write_text("- Use pnpm, never npm.\n- Never modify git config.\n")
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    t.join(timeout=5)
    assert seen and seen[0] == f.resolve()


def test_ledger_and_revert(store, embedder) -> None:
    s = Settings()
    bullet = route_correction(
        store, "The package lives in src/calc.", None, s, denial=True, embedder=embedder
    )
    guard = route_correction(
        store, "Never modify git config.", None, s, denial=True, embedder=embedder
    )
    store.bump("context_tokens", 10)
    store.bump("notes_only_tokens", 40)
    ledger = build_ledger(store)
    assert isinstance(ledger, LedgerResult)
    assert {i.id for i in ledger.items} == {bullet.id, guard.id}
    assert ledger.context_tokens == 10 and ledger.notes_only_tokens == 40
    assert all(i.recurrence == 1 and i.active for i in ledger.items)
    wire = ledger.dump()
    assert {"items", "contextTokens", "notesOnlyTokens"} <= set(wire)
    call = ToolCall(tool="bash", arguments={"cmd": "git config user.name x"})
    assert check_guards(store, call).action == "block"
    assert revert(store, guard.id) == "CODE"
    assert check_guards(store, call).action == "allow"
    assert revert(store, bullet.id) == "CONTEXT"
    assert not any(i.active for i in build_ledger(store).items)
    with pytest.raises(LedgerError):
        revert(store, "no-such-id")
    store.add_adapter("consolidate-x", "/tmp/x", "abc", None, {})
    with pytest.raises(AdapterRevertNeeded) as err:
        revert(store, "consolidate-x")
    assert err.value.version == 1


def test_routing_stats_never_leaks_text(store, embedder) -> None:
    import_rules(store, SAMPLE, Settings())
    secret = "Project Bluebird ships only from the zz-secret-branch, never npm."
    route_correction(
        store, secret, Situation(task_text="deploy"), Settings(), denial=True, embedder=embedder
    )
    stats = routing_stats(store)
    dumped = json.dumps(stats)
    for item in store.lane_items():
        assert item["text"] not in dumped
        for word in ("Bluebird", "zz-secret-branch", "pnpm", "vendor", "src/calc", "npm"):
            assert word not in dumped
    assert stats["by_lane"]["CODE"] >= 2
    d = stats["decisions"][0]
    assert set(d) >= {"lane", "kind", "checkable", "cluster_size", "confidence"}
