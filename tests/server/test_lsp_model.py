"""End-to-end with the embedded model (SmolLM2-135M), over stdio (training on: one real
SDPO step after a denial) and over TCP with a token (training off: edit, then approve).

What the model proposes is its own choice, so these tests assert what the server
guarantees for any proposal: a notification, diagnostics and code actions for file
changes, a learning step with progress after a denial, the edited call executed and
its diff recorded. The deterministic approve / deny / edit checks on exact file
contents are in test_lsp_scripted.py and test_nvim.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as lsp

from continual_lsp.store import Store

from .harness import Editor, start_tcp_server

pytestmark = pytest.mark.model

TASK = "Fix mean() in src/calc/ops.py so it returns a float: use / instead of //."
CORRECTION = "Use edit_lines on src/calc/ops.py and change only line 7."
FIX = {
    "tool": "edit_lines",
    "path": "src/calc/ops.py",
    "start": 7,
    "end": 7,
    "content": "    return sum(values) / len(values)\n",
}


def store_rows(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    store = Store(path)
    try:
        ids = [r[0] for r in store._query("SELECT proposal_id FROM decisions")]
        return {pid: store.decision(pid) for pid in ids}, store.events()
    finally:
        store.close()


async def check_file_proposal(ed: Editor, proposal: dict[str, Any]) -> None:
    """A file-changing proposal shows as a diagnostic with the four code actions."""
    if not proposal.get("range") or not proposal.get("diff"):
        return
    uri = proposal["uri"]
    ed.open(uri)
    diags = await ed.wait_until(lambda: ed.diagnostics(uri))
    assert diags[0].source == "continual"
    assert diags[0].message.startswith(f"Proposed {proposal['tool']}")
    actions = await ed.code_actions(uri, proposal["range"]["start"]["line"])
    assert [a.title.split(":")[0] for a in actions][:1] == ["Approve"]
    assert len(actions) == 4


def test_model_stdio_deny_runs_a_learning_step(workspace: Path, tmp_path: Path) -> None:
    """Training on: a denial commits the correction, the retry arrives as the next
    proposal, and one SDPO step runs (with $/progress and continual/learned)."""
    store = tmp_path / "store.sqlite3"

    async def scenario() -> str:
        ed = Editor(workspace, understands_proposals=True)
        try:
            # Read-only calls come to the reviewer too: a small model often starts with a
            # grep, and auto-approving it can end the task before anything is proposed.
            await ed.start_stdio(store, "--training", "--sandbox", "bwrap", "--review-reads")
            await ed.initialize()
            task = await ed.request("continual/startTask", {"text": TASK}, timeout=300)
            first = await ed.wait_for("continual/proposal", timeout=300)
            assert first["taskId"] == task["taskId"]
            await check_file_proposal(ed, first)

            denied = await ed.request(
                "continual/decide",
                {"proposalId": first["proposalId"], "decision": "deny", "correction": CORRECTION},
                timeout=600,
            )
            assert denied["ok"] is True
            # The retry does not wait for the step: the step is announced when it lands.
            assert denied.get("learned") is None
            learned = await ed.wait_for("continual/learned", timeout=600)
            assert learned["proposalId"] == first["proposalId"] and learned["adapterVersion"]
            assert learned["step"] >= 1 and learned["seconds"] > 0
            values = [p.value for p in ed.notes[lsp.PROGRESS]]
            assert [v.get("kind") for v in values][:1] == ["begin"] and values[-1]["kind"] == "end"
            if denied.get("nextProposalId"):
                await ed.wait_for(
                    "continual/proposal", lambda p: p["proposalId"] == denied["nextProposalId"]
                )
            else:
                # The retry is the model's: calls that cannot run, or the denied call again,
                # may end the task (CI's numerics once did) — and then the reviewer is told why.
                done = await ed.wait_for("continual/taskDone")
                assert done["taskId"] == task["taskId"] and done["summary"]
            status = await ed.request("continual/status", {})
            assert status["trainingSteps"] >= 1 and status["adapterVersion"]
            return learned["adapterVersion"]
        finally:
            await ed.stop()

    version = asyncio.run(asyncio.wait_for(scenario(), 900))
    rows, events = store_rows(store)
    assert [d["correction"] for d in rows.values()] == [CORRECTION]
    # the denial was committed before its training job was queued (durability rule)
    kinds = [e["kind"] for e in events]
    assert kinds.index("decision") < kinds.index("job_queued") < kinds.index("adapter")
    # the job was committed held with the denial; the retry was chosen among candidates
    # sampled with the correction in context, and only then was the job released to the
    # worker with it as the demonstration (DESIGN §4) ...
    chosen = kinds.index("retry_chosen")
    assert kinds.index("job_queued") < chosen < kinds.index("job_released") < kinds.index("adapter")
    assert events[kinds.index("job_queued")]["payload"]["held"] is True
    # ... and every proposal sampled after the step comes from the new adapter
    after = events[kinds.index("adapter") + 1 :]
    assert all(e["payload"]["adapterVersion"] == version for e in after if e["kind"] == "proposal")


def test_model_over_tcp_with_token(workspace: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"carol-token-1234": "carol"}))
    store = tmp_path / "store.sqlite3"

    async def scenario() -> None:
        process, port, log = await start_tcp_server(
            store, str(tokens), "--sandbox", "bwrap", "--review-reads"
        )
        try:
            ed = Editor(workspace, understands_proposals=True)
            await ed.start_tcp(port)
            await ed.initialize(token="carol-token-1234")
            await ed.request("continual/startTask", {"text": TASK}, timeout=300)
            first = await ed.wait_for("continual/proposal", timeout=300)
            await check_file_proposal(ed, first)
            result = await ed.request(
                "continual/decide",
                {"proposalId": first["proposalId"], "decision": "edit", "editedArguments": FIX},
                timeout=300,
            )
            assert result["ok"] is True
            assert "/ len(values)" in (workspace / "src/calc/ops.py").read_text()
            # approve whatever comes next (a bash call runs in the bwrap sandbox)
            if result.get("nextProposalId"):
                second = await ed.wait_for(
                    "continual/proposal", lambda p: p["proposalId"] == result["nextProposalId"]
                )
                await check_file_proposal(ed, second)
                approved = await ed.request(
                    "continual/decide",
                    {"proposalId": second["proposalId"], "decision": "approve"},
                    timeout=300,
                )
                assert approved["ok"] is True
            await ed.stop()
        except BaseException:
            print("\n".join(log))
            raise
        finally:
            process.terminate()
            await process.wait()

    asyncio.run(asyncio.wait_for(scenario(), 600))
    rows, _ = store_rows(tmp_path / "users" / "carol" / "store.sqlite3")
    decided = [d["decision"] for d in rows.values()]
    assert "edit" in decided and set(decided) <= {"edit", "approve"}
    edit = next(d for d in rows.values() if d["decision"] == "edit")
    assert edit["diff"] and "/ len(values)" in edit["diff"]
