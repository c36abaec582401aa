"""Issue 19 over stdio (the real Agent on the embedded model forced to scripted calls):
per-hunk decisions on the wire and as code actions, continual/allow, continual/undo and
its refusal, the ledger's counters and the autonomy in status."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from pygls.exceptions import JsonRpcException

from .harness import Editor, decisions

pytestmark = pytest.mark.model

REJECT = "Keep mean() as it is for now."


def test_hunks_allow_and_undo_over_the_wire(workspace: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite3"
    ops_path = workspace / "src/calc/ops.py"

    async def scenario() -> None:
        ed = Editor(workspace, understands_proposals=True)
        try:
            await ed.start_stdio(store, "--script", "review", "--sandbox", "bwrap")
            await ed.initialize()
            ops = ed.open("src/calc/ops.py")
            task = await ed.request("continual/startTask", {"text": "document add, fix mean"})
            first = task["proposal"]
            assert [h["index"] for h in first["hunks"]] == [0, 1]
            # a diagnostic per hunk, and Accept / Reject code actions on each
            diags = await ed.wait_until(
                lambda: len(ed.diagnostics(ops)) == 3 and ed.diagnostics(ops)
            )
            assert sorted(d.data["hunk"] for d in diags if "hunk" in d.data) == [0, 1]
            titles = [a.title for a in await ed.code_actions(ops, 1)]  # a docstring before line 2
            assert titles[:2] == ["Accept hunk 1/2", "Reject hunk 1/2…"]
            # hunk 1 accepted by its code action's command: one verdict is not a decision
            pending = await ed.command("continual.hunk", first["proposalId"], 0, True)
            assert pending == {"ok": True, "pending": [1]}
            with pytest.raises(JsonRpcException, match="decide each exactly once"):
                await ed.request(
                    "continual/decide",
                    {"proposalId": first["proposalId"], "decision": "edit",
                     "hunks": [{"index": 1, "accept": False}]},
                )  # fmt: skip
            done = await ed.command("continual.hunk", first["proposalId"], 1, False, REJECT)
            assert done["ok"] and done["nextProposal"]["tool"] == "bash"
            text = ops_path.read_text()
            assert '"""Sum of a and b."""' in text and "// len(values)" in text
            await ed.wait_until(lambda: '"""Sum of a and b."""' in ed.buffers[ops])

            # bash approved once; in a new task the same call, "always allow"
            second = done["nextProposal"]
            changes = await ed.request(
                "continual/decide", {"proposalId": second["proposalId"], "decision": "approve"}
            )
            changes = changes["nextProposal"]
            assert changes["arguments"]["path"] == "CHANGES.md"
            again = (await ed.request("continual/startTask", {"text": "status"}))["proposal"]
            assert again["arguments"] == {"cmd": "git status"}
            allowed = await ed.request("continual/allow", {"proposalId": again["proposalId"]})
            assert allowed["ok"] and allowed["rule"] == "bash: `git status …`, no other options"
            await ed.request(
                "continual/decide", {"proposalId": again["proposalId"], "decision": "approve"}
            )
            # a third task's git status runs unasked: the proposal shown is the call after it
            third = (await ed.request("continual/startTask", {"text": "status again"}))["proposal"]
            assert third["arguments"] == {"cmd": "echo tests-ran"}

            # approve the new file, then undo it: restored (gone) on disk
            await ed.request(
                "continual/decide", {"proposalId": changes["proposalId"], "decision": "approve"}
            )
            assert (workspace / "CHANGES.md").exists()
            undone = await ed.request("continual/undo", {"reason": "No changelog in this repo."})
            assert undone == {
                "ok": True,
                "proposalId": changes["proposalId"],
                "restored": ["CHANGES.md"],
            }
            assert not (workspace / "CHANGES.md").exists()
            # the partial edit of ops.py, after the reviewer changed the file: refused
            ops_path.write_text(ops_path.read_text() + "# mine\n")
            with pytest.raises(JsonRpcException, match=r"src/calc/ops\.py changed since"):
                await ed.request("continual/undo", {"proposalId": first["proposalId"]})
            assert ops_path.read_text().endswith("# mine\n")

            ledger = await ed.request("continual/ledger", {})
            rule = next(i for i in ledger["items"] if i["id"] == allowed["itemId"])
            assert rule["lane"] == "CODE" and rule["fired"] == 1
            assert rule["approvals"] == [second["proposalId"]]
            status = await ed.request("continual/status", {})
            assert status["autonomy"] == "allow_rules"
        finally:
            await ed.stop()

    asyncio.run(asyncio.wait_for(scenario(), 600))
    by_id = decisions(store)
    partial = next(d for d in by_id.values() if d["decision"] == "edit")
    assert partial["correction"] == f"hunk 2: {REJECT}"
    assert partial["edited_arguments"]["tool"] == "write"


def test_review_decides_hunk_by_hunk(workspace: Path, tmp_path: Path) -> None:
    from .test_lsp_scripted import _review

    hunks = [{"index": 0, "accept": True}, {"index": 1, "accept": False, "reason": REJECT}]
    text = json.dumps({"decision": "edit", "hunks": hunks}) + "\n"
    proc, lines = _review(tmp_path, workspace, text, "--script", "review")
    assert proc.returncode == 0, proc.stderr
    first = next(line for line in lines if line["type"] == "proposal")
    assert [h["index"] for h in first["hunks"]] == [0, 1]
    ops = (workspace / "src/calc/ops.py").read_text()
    assert '"""Sum of a and b."""' in ops and "// len(values)" in ops
    (row,) = decisions(tmp_path / "review.sqlite3").values()
    assert row["decision"] == "edit" and row["correction"] == f"hunk 2: {REJECT}"
