"""A proposal a guard blocks, over the wire (stdio and `review`): `blockedBy`, the
*Override guard* code action instead of *Approve*, approve refused naming override,
override runs the call and the ledger counts it. The real Agent on the embedded model
forced to scripted calls (scripted.py: "override")."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from continual_lsp.store import Store

from .harness import REPO, Editor, decisions
from .scripted import CALC_GUARD

pytestmark = pytest.mark.model

GUARD = "Leave src/calc/ alone."


def seeded(path: Path) -> str:
    store = Store(path)
    guard_id = store.add_lane_item(CALC_GUARD)
    store.close()
    return guard_id


def test_a_blocked_proposal_offers_override_and_override_runs_it(
    workspace: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store.sqlite3"
    guard_id = seeded(store)

    async def scenario() -> None:
        ed = Editor(workspace, understands_proposals=True)
        try:
            await ed.start_stdio(store, "--script", "override")
            await ed.initialize()
            ops = ed.open("src/calc/ops.py")
            task = await ed.request("continual/startTask", {"text": "fix mean()"})
            shown = task["proposal"]
            assert shown["tool"] == "edit_lines" and shown["blockedBy"] == GUARD
            diags = await ed.wait_until(lambda: ed.diagnostics(ops))
            assert diags[0].message.startswith(f"Blocked by a guard ({GUARD}): Proposed")
            actions = await ed.code_actions(ops, 6)
            assert [a.title.split(":")[0] for a in actions] == [
                "Override guard",
                "Deny with correction…",
                "Edit proposal…",
                "Show diff",
            ]
            override = actions[0]
            assert override.command is not None and override.command.command == (
                "continual.override"
            )
            with pytest.raises(JsonRpcException, match="override"):
                await ed.command("continual.approve", shown["proposalId"])
            # Refused before the buffer was touched; still pending.
            assert "sum(values) // len(values)" in ed.buffers[ops]
            pending = await ed.request("continual/pending", {})
            assert [p["blockedBy"] for p in pending["proposals"]] == [GUARD]
            result = await ed.command("continual.override", shown["proposalId"])
            assert result["ok"] is True
            on_disk = (workspace / "src/calc/ops.py").read_text()
            assert "return sum(values) / len(values)" in on_disk
            await ed.wait_until(lambda: ed.buffers[ops] == on_disk)
            assert result["nextProposal"]["tool"] == "bash"
            assert "blockedBy" not in result["nextProposal"]
            ledger = await ed.request("continual/ledger", {})
            [item] = [i for i in ledger["items"] if i["id"] == guard_id]
            assert (item["lane"], item["overridden"]) == ("CODE", 1)
        finally:
            await ed.stop()

    asyncio.run(asyncio.wait_for(scenario(), 180))
    assert sorted(d["decision"] for d in decisions(store).values()) == ["deny", "override"]


def review(tmp_path: Path, workspace: Path, lines: list[dict[str, Any]]) -> Any:
    store = tmp_path / "review.sqlite3"
    if not store.exists():
        seeded(store)
    (tmp_path / "decisions.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))
    out = tmp_path / "review.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.server.launch",
            "--review",
            "--store",
            str(store),
            "--task",
            "fix mean()",
            "--workspace",
            str(workspace),
            "--decisions",
            str(tmp_path / "decisions.jsonl"),
            "--out",
            str(out),
            "--script",
            "override",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, [json.loads(line) for line in out.read_text().splitlines()]


def test_review_shows_blocked_by_and_takes_override(workspace: Path, tmp_path: Path) -> None:
    refused, lines = review(tmp_path, workspace, [{"decision": "approve"}])
    assert refused.returncode == 2 and 'decision "override"' in refused.stderr
    assert [line["blockedBy"] for line in lines if line["type"] == "proposal"] == [GUARD]
    proc, lines = review(tmp_path, workspace, [{"decision": "override"}])
    assert proc.returncode == 0, proc.stderr
    [outcome] = [line for line in lines if line["type"] == "outcome"]
    assert outcome["decision"] == "override" and outcome["result"]["ok"] is True
    assert "return sum(values) / len(values)" in (workspace / "src/calc/ops.py").read_text()


def test_a_plain_client_is_asked_to_override_not_approve(workspace: Path, tmp_path: Path) -> None:
    """A client that does not render proposals gets a blocked bash call through
    window/showMessageRequest with Override guard in place of Approve; choosing it runs it."""
    store = tmp_path / "store.sqlite3"
    seeded_store = Store(store)
    guard_id = seeded_store.add_lane_item(
        {
            "text": "Do not echo.",
            "lane": "CODE",
            "reason": "seeded by the test",
            "spec": {
                "message": "Do not echo.",
                "rules": [{"kind": "command", "pattern": "^echo "}],
            },
        }
    )
    seeded_store.close()

    async def scenario() -> None:
        ed = Editor(workspace)  # does not declare continualProposals
        ed.message_choice = lambda params: params.actions[0].title
        try:
            await ed.start_stdio(store, "--script", "blocked_bash")
            await ed.initialize()
            await ed.request("continual/startTask", {"text": "run the tests"})
            await ed.wait_until(lambda: ed.message_requests, timeout=120)
            request = ed.message_requests[0]
            assert request.message.startswith("Blocked by a guard (Do not echo.): Proposed bash")
            assert [a.title for a in request.actions] == ["Override guard", "Deny…", "Edit…"]
            await ed.wait_until(overridden_once, timeout=60)
        finally:
            await ed.stop()

    def overridden_once() -> bool:
        rows = decisions(store)
        return "override" in [d["decision"] for d in rows.values()] and overridden() == 1

    def overridden() -> int:
        check = Store(store)
        try:
            return int(check.counter(f"overridden:{guard_id}"))
        finally:
            check.close()

    asyncio.run(asyncio.wait_for(scenario(), 180))
    assert [d["decision"] for d in decisions(store).values()][:2] == ["deny", "override"]
    assert overridden() == 1
