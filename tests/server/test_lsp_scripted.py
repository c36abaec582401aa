"""End-to-end over stdio and TCP with the real Agent on the embedded model forced to scripted calls.

These check the protocol: notifications, diagnostics, code actions, commands, files
opened for the reviewer, errors for bad input, TCP tokens and user isolation, and the
headless `review` command. The model-backed tests (test_lsp_model.py) run the same
paths with SmolLM2.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

from continual_lsp.store import Store

from .harness import REPO, Editor, decisions, in_view, start_tcp_server
from .scripted import DONE

pytestmark = pytest.mark.slow

DENY_TEXT = "Never weaken a test; fix the code instead."


def run(coro_fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(coro_fn(), 180))


async def started(editor: Editor, store: Path, *args: str) -> None:
    await editor.start_stdio(store, *args)
    await editor.initialize()


def test_stdio_approve_deny_edit_flow(workspace: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite3"

    async def scenario() -> None:
        ed = Editor(workspace, understands_proposals=True)
        try:
            await started(ed, store, "--script", "flow")
            ops = ed.open("src/calc/ops.py")
            task = await ed.request("continual/startTask", {"text": "fix mean()"})
            first = await ed.wait_for("continual/proposal")
            assert first["taskId"] == task["taskId"]
            assert first["tool"] == "edit_lines" and first["uri"] == ops
            # the response comes first and carries the proposal; the notification repeats it
            answered = ed.order.index(("response", task))
            assert answered < ed.order.index(("notify", "continual/proposal"))
            assert task["proposal"] == first
            assert "-    return sum(values) // len(values)" in first["diff"]

            # diagnostics on the changed line, then the four code actions there
            diags = await ed.wait_until(lambda: ed.diagnostics(ops))
            assert diags[0].source == "continual"
            assert diags[0].severity == lsp.DiagnosticSeverity.Information
            assert diags[0].message.startswith("Proposed edit_lines: replace line 7")
            assert diags[0].range.start.line == 6
            assert await ed.code_actions(ops, 0) == []  # not on lines it does not change
            actions = await ed.code_actions(ops, 6)
            assert [a.title.split(":")[0] for a in actions] == [
                "Approve",
                "Deny with correction…",
                "Edit proposal…",
                "Show diff",
            ]
            approve = actions[0]
            # The command alone: the server applies the edit (versioned applyEdit), so a
            # client that sends didChange late cannot race it into a double edit.
            assert approve.edit is None and approve.command is not None
            assert approve.command.command == "continual.approve"
            assert list(approve.command.arguments or []) == [first["proposalId"]]

            # Show diff opens a .diff file
            shown = await ed.command("continual.showDiff", first["proposalId"])
            assert shown["uri"].endswith(".diff") and shown["uri"] in ed.shown
            assert (
                "+    return sum(values) / len(values)"
                in Path(shown["uri"].removeprefix("file://")).read_text()
            )

            # approve as a client runs the code action: its command
            result = await ed.command("continual.approve", first["proposalId"])
            assert result["ok"] is True
            on_disk = (workspace / "src/calc/ops.py").read_text()
            assert "return sum(values) / len(values)" in on_disk
            assert ed.buffers[ops] == on_disk
            await ed.wait_until(lambda: not ed.diagnostics(ops))

            # deny with a correction: the retry is the next proposal
            second = await ed.wait_for(
                "continual/proposal", lambda p: p["proposalId"] == result["nextProposalId"]
            )
            assert second["uri"].endswith("tests/test_ops.py")
            denied = await ed.command("continual.deny", second["proposalId"], DENY_TEXT)
            third = await ed.wait_for(
                "continual/proposal", lambda p: p["proposalId"] == denied["nextProposalId"]
            )
            assert "assert mean([1, 2]) == 1.5" in (workspace / "tests/test_ops.py").read_text()

            # edit: the proposed content opens as a file; saving it is the edit
            opened = await ed.command("continual.edit", third["proposalId"])
            edit_uri = opened["uri"]
            assert edit_uri in ed.shown and edit_uri.endswith("/ops.py")
            ed.open(edit_uri)
            proposed = ed.buffers[edit_uri]
            assert '"""Sum of a and b."""' in proposed
            ed.save(edit_uri, proposed.replace("Sum of a and b.", "Return a + b."))
            fourth = await ed.wait_for("continual/proposal", lambda p: p["tool"] == "bash")
            assert fourth["readOnly"] is False and "uri" not in fourth
            on_disk = (workspace / "src/calc/ops.py").read_text()
            assert '"""Return a + b."""' in on_disk and "/ len(values)" in on_disk
            # the open buffer follows what the edited call wrote
            await ed.wait_until(lambda: ed.buffers[ops] == on_disk)

            status = await ed.request("continual/status", {})
            assert status["pendingProposalId"] == fourth["proposalId"]
            ledger = await ed.request("continual/ledger", {})
            assert set(ledger) >= {"items", "contextTokens", "notesOnlyTokens"}
        finally:
            await ed.stop()

    run(scenario)
    rows = decisions(store)
    kinds = sorted(d["decision"] for d in rows.values())
    assert kinds == ["approve", "deny", "edit"]
    deny = next(d for d in rows.values() if d["decision"] == "deny")
    assert deny["correction"] == DENY_TEXT
    edit = next(d for d in rows.values() if d["decision"] == "edit")
    assert edit["edited_arguments"]["tool"] == "edit"  # the proposal's own tool
    assert '+    """Return a + b."""' in edit["diff"]


def test_bad_input_gets_clear_errors_and_the_server_keeps_serving(
    workspace: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store.sqlite3"

    async def error_of(awaitable: Awaitable[Any]) -> JsonRpcException:
        with pytest.raises(JsonRpcException) as info:
            await awaitable
        return info.value

    async def scenario() -> None:
        ed = Editor(workspace, understands_proposals=True)
        try:
            await started(ed, store, "--script", "flow")
            err = await error_of(ed.request("continual/nope", {}))
            assert err.code == -32601 and "continual/nope" in err.message
            err = await error_of(ed.request("continual/decide", {"proposalId": "p"}))
            assert err.code == -32602 and "decision" in err.message
            err = await error_of(ed.request("continual/startTask", {"text": ""}))
            assert err.code == -32602 and "text" in err.message
            err = await error_of(ed.request("continual/decide", ["not", "an", "object"]))
            assert err.code == -32602
            err = await error_of(
                ed.raw_request("textDocument/codeAction", {"textDocument": {"uri": "file:///x"}})
            )
            assert err.code == -32602 and "range" in err.message
            err = await error_of(ed.command("continual.approve"))
            assert err.code == -32602 and "proposalId" in err.message
            err = await error_of(
                ed.request("continual/decide", {"proposalId": "prop-nope", "decision": "approve"})
            )
            assert err.code == -32803 and "unknown proposal" in err.message

            # approve after the file changed on disk: refused, nothing written
            await ed.request("continual/startTask", {"text": "fix mean()"})
            first = await ed.wait_for("continual/proposal")
            ops = workspace / "src/calc/ops.py"
            await ed.wait_until(lambda: ed.diagnostics(first["uri"]))
            ops.write_text(ops.read_text() + "\n# changed by hand\n")
            # the watcher notices, invalidates the proposal and clears its diagnostic
            await ed.wait_until(
                lambda: any("is stale" in m.message for m in ed.notes[lsp.WINDOW_SHOW_MESSAGE])
            )
            assert ed.diagnostics(first["uri"]) == []
            err = await error_of(ed.command("continual.approve", first["proposalId"]))
            assert "stale" in err.message or "changed on disk" in err.message
            assert ops.read_text().endswith("# changed by hand\n")
            err = await error_of(ed.command("continual.approve", first["proposalId"]))
            assert "stale" in err.message

            # a proposal whose file was deleted
            await ed.request("continual/startTask", {"text": "again"})
            second = await ed.wait_for(
                "continual/proposal", lambda p: p["proposalId"] != first["proposalId"]
            )
            target = workspace / second["arguments"]["path"]
            target.unlink()
            err = await error_of(
                ed.request(
                    "continual/decide", {"proposalId": second["proposalId"], "decision": "approve"}
                )
            )
            assert err.code == -32803 and err.message
            assert not target.exists()

            # a decided proposal cannot be decided again
            err = await error_of(
                ed.request(
                    "continual/decide",
                    {"proposalId": second["proposalId"], "decision": "deny", "correction": "x"},
                )
            )
            assert "stale" in err.message or "already" in err.message

            status = await ed.request("continual/status", {})
            assert status["backend"]
        finally:
            await ed.stop()

    run(scenario)


def test_plain_client_gets_bash_through_show_message_request(
    workspace: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store.sqlite3"

    async def scenario() -> None:
        ed = Editor(workspace)  # does not declare continualProposals
        ed.message_choice = lambda params: params.actions[0].title
        try:
            await started(ed, store, "--script", "bash")
            await ed.request("continual/startTask", {"text": "run the tests"})
            await ed.wait_until(lambda: ed.message_requests)
            request = ed.message_requests[0]
            assert request.message.startswith("Proposed bash: run `echo tests-ran`")
            assert [a.title for a in request.actions] == ["Approve", "Deny…", "Edit…"]
            # The agent's done: its summary is the message, approving it is Finish task.
            await ed.wait_until(lambda: len(ed.message_requests) > 1)
            finish = ed.message_requests[1]
            summary = DONE["arguments"]["summary"]
            assert finish.message == f"Proposed done: finish the task: {summary}"
            assert [a.title for a in finish.actions] == ["Finish task", "Deny…", "Edit…"]
            done = await ed.wait_for("continual/taskDone")
            assert done["summary"] == summary
        finally:
            await ed.stop()

    run(scenario)
    assert [d["decision"] for d in decisions(store).values()] == ["approve", "approve"]


def test_correction_file_and_manual_edit_signal(workspace: Path, tmp_path: Path) -> None:
    """Deny without a correction opens a correction file; saving it denies. A reviewer
    change to lines just applied is recorded as an edit signal."""
    store = tmp_path / "store.sqlite3"

    async def scenario() -> None:
        ed = Editor(workspace, understands_proposals=True)
        try:
            await started(ed, store, "--script", "flow")
            ops = ed.open("src/calc/ops.py")
            await ed.request("continual/startTask", {"text": "fix mean()"})
            first = await ed.wait_for("continual/proposal")
            # approve through the command alone: the server applies the edit itself
            await ed.command("continual.approve", first["proposalId"])
            assert "/ len(values)" in ed.buffers[ops]
            # the reviewer retouches the applied line
            ed.change(ops, ed.buffers[ops].replace("/ len(values)", "/ max(len(values), 1)"))
            second = await ed.wait_for(
                "continual/proposal", lambda p: p["proposalId"] != first["proposalId"]
            )
            opened = await ed.command("continual.deny", second["proposalId"])
            correction = opened["uri"]
            assert correction.endswith(f"{second['proposalId']}.md")
            ed.open(correction)
            assert "write your correction" in ed.buffers[correction]
            ed.save(correction)  # nothing written yet: nothing is sent
            await ed.wait_until(
                lambda: any("empty" in m.message for m in ed.notes[lsp.WINDOW_SHOW_MESSAGE])
            )
            ed.save(correction, ed.buffers[correction] + DENY_TEXT + "\n")
            await ed.wait_for(
                "continual/proposal",
                lambda p: p["proposalId"] not in (first["proposalId"], second["proposalId"]),
            )
        finally:
            await ed.stop()
        return first["proposalId"]

    first_id: Any = None

    async def wrapped() -> None:
        nonlocal first_id
        first_id = await scenario()

    run(wrapped)
    rows = decisions(store)
    assert any(d["correction"] == DENY_TEXT for d in rows.values())
    s = Store(store)
    try:
        manual = [e for e in s.events(proposal_id=first_id) if "manual" in e["kind"]]
    finally:
        s.close()
    assert manual, "the manual edit was not recorded"
    assert "max(len(values), 1)" in json.dumps(manual[-1]["payload"])


def test_tcp_requires_a_token_and_keeps_users_apart(workspace: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"alice-token-123": "alice", "bob-token-4567": "bob"}))
    store = tmp_path / "store.sqlite3"
    secret = "alice's private correction: never touch tests/"
    roots = tmp_path / "roots"  # each user opens only roots/<user> (issue 32)
    shutil.copytree(workspace, roots / "alice")
    shutil.copytree(workspace, roots / "bob")

    async def scenario() -> None:
        process, port, server_log = await start_tcp_server(
            store,
            str(tokens),
            "--script",
            "flow",
            env={"CONTINUAL_LSP_WORKSPACE_ROOTS": str(roots)},
        )
        try:
            # no token, a wrong token, a first request other than initialize: refused
            for options in (None, {"token": "wrong-token-000"}):
                ed = Editor(workspace)
                await ed.start_tcp(port)
                with pytest.raises(JsonRpcException, match="unauthorized"):
                    await asyncio.wait_for(ed.initialize(**(options or {})), 10)
                await ed.client.stop()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "continual/status"}).encode()
            writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            reply = await asyncio.wait_for(reader.read(), 10)  # answered, then closed
            assert b"must be initialize" in reply
            writer.close()

            # a valid token, but a workspace outside the server's workspace roots
            outside = Editor(tmp_path)
            await outside.start_tcp(port)
            with pytest.raises(JsonRpcException, match="outside the workspace roots"):
                await asyncio.wait_for(outside.initialize(token="alice-token-123"), 10)
            await outside.stop(quiet=True)  # the connection stays open for another try

            alice = Editor(roots / "alice", understands_proposals=True)
            await alice.start_tcp(port)
            await alice.initialize(token="alice-token-123")
            await alice.request("continual/startTask", {"text": "fix mean()"})
            first = await alice.wait_for("continual/proposal")
            await alice.command("continual.approve", first["proposalId"])
            second = await alice.wait_for(
                "continual/proposal", lambda p: p["proposalId"] != first["proposalId"]
            )
            await alice.command("continual.deny", second["proposalId"], secret)

            bob = Editor(roots / "bob", understands_proposals=True)
            await bob.start_tcp(port)
            await bob.initialize(token="bob-token-4567")
            bob_ledger = await bob.request("continual/ledger", {})
            assert secret not in json.dumps(bob_ledger)
            bob_status = await bob.request("continual/status", {})
            assert bob_status.get("pendingProposalId") is None
            with pytest.raises(JsonRpcException, match="unknown proposal"):
                await bob.request(
                    "continual/decide", {"proposalId": first["proposalId"], "decision": "approve"}
                )
            await bob.stop()
            await alice.stop()

            # the same process serves the next connection of the same user
            again = Editor(roots / "alice", understands_proposals=True)
            await again.start_tcp(port)
            await again.initialize(token="alice-token-123")
            assert (await again.request("continual/status", {}))["backend"]
            await again.stop()
        except BaseException:
            print("\n".join(server_log), file=sys.stderr)  # shown by pytest on failure
            raise
        finally:
            process.terminate()
            await process.wait()

    run(scenario)
    alice_store = tmp_path / "users" / "alice" / "store.sqlite3"
    bob_store = tmp_path / "users" / "bob" / "store.sqlite3"
    assert any(d["correction"] == secret for d in decisions(alice_store).values())
    assert not decisions(bob_store)
    assert not store.exists()


def test_a_tcp_token_opens_only_its_own_root(tmp_path: Path) -> None:
    """Issue 32: alice's token opened bob's folder, or the roots folder holding everyone's,
    and unreviewed read and grep then showed bob's files. A TCP workspace must resolve
    (symlinks included) to inside roots/<user>."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"alice-token-123": "alice", "bob-token-4567": "bob"}))
    roots = tmp_path / "roots"
    for user in ("alice", "bob"):
        (roots / user / "src").mkdir(parents=True)
    (roots / "bob" / "src" / "secret.py").write_text("BOB_SECRET = 1\n")
    (roots / "alice" / "to-bob").symlink_to(roots / "bob")
    (roots / "alice-2").mkdir()  # a sibling whose name starts with alice's

    async def scenario() -> None:
        process, port, server_log = await start_tcp_server(
            tmp_path / "store.sqlite3",
            str(tokens),
            "--script",
            "flow",
            env={"CONTINUAL_LSP_WORKSPACE_ROOTS": str(roots)},
        )
        try:
            refused = [
                roots / "bob",
                roots,
                roots / "alice" / "to-bob",
                roots / "alice" / ".." / "bob",
                roots / "alice-2",
                roots / "nobody",  # refused as outside, not as missing
            ]
            for folder in refused:
                editor = Editor(folder)
                await editor.start_tcp(port)
                with pytest.raises(JsonRpcException, match="outside the workspace roots") as err:
                    await asyncio.wait_for(editor.initialize(token="alice-token-123"), 30)
                assert str(roots / "alice") in str(err.value)  # the root alice may open
                await editor.stop(quiet=True)
            for user, token in (("alice", "alice-token-123"), ("bob", "bob-token-4567")):
                own = Editor(roots / user)
                await own.start_tcp(port)
                await asyncio.wait_for(own.initialize(token=token), 30)
                assert "backend" in await own.request("continual/status", {})
                await own.stop(quiet=True)
        except BaseException:
            print("\n".join(server_log), file=sys.stderr)
            raise
        finally:
            process.terminate()
            await process.wait()

    run(scenario)


def _review(tmp_path: Path, workspace: Path, decisions_text: str, *extra: str) -> Any:
    decisions_file = tmp_path / "decisions.jsonl"
    decisions_file.write_text(decisions_text)
    out = tmp_path / "review.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.server.launch",
            "--review",
            "--store",
            str(tmp_path / "review.sqlite3"),
            "--task",
            "fix mean()",
            "--workspace",
            str(workspace),
            "--decisions",
            str(decisions_file),
            "--out",
            str(out),
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return proc, lines


def test_review_with_a_decisions_file(workspace: Path, tmp_path: Path) -> None:
    edited = {"path": "src/calc/ops.py", "old": "def add(a, b):\n", "new": "def add(a, b):  # +\n"}
    text = "\n".join(
        json.dumps(d)
        for d in (
            {"decision": "approve"},
            {"decision": "deny", "correction": DENY_TEXT},
            {"decision": "edit", "editedArguments": edited},
        )
    )
    proc, lines = _review(tmp_path, workspace, text + "\n", "--script", "flow")
    assert proc.returncode == 0, proc.stderr
    kinds = [line["type"] for line in lines]
    assert kinds[0] == "task" and kinds.count("proposal") == 4 and kinds.count("outcome") == 3
    assert kinds[-1] == "stopped"
    proposals = [line for line in lines if line["type"] == "proposal"]
    assert "-    return sum(values) // len(values)" in proposals[0]["diff"]
    assert [o["decision"] for o in lines if o["type"] == "outcome"] == ["approve", "deny", "edit"]
    ops = (workspace / "src/calc/ops.py").read_text()
    assert "def add(a, b):  # +" in ops and "/ len(values)" in ops
    rows = decisions(tmp_path / "review.sqlite3")
    assert sorted(d["decision"] for d in rows.values()) == ["approve", "deny", "edit"]

    bad, _ = _review(tmp_path, workspace, '{"decision": "maybe"}\n', "--script", "flow")
    assert bad.returncode == 2 and "decisions line 1" in bad.stderr


def test_review_ends_with_the_agents_done(workspace: Path, tmp_path: Path) -> None:
    """The fifth proposal is the model's done: a proposal line with its summary, and
    approving it is the end of the run (a taskDone line with the same words)."""
    decided = ["approve", "deny", "edit", "approve", "approve"]
    edited = {"path": "src/calc/ops.py", "old": "def add(a, b):\n", "new": "def add(a, b):  # +\n"}
    lines_in = [
        {"decision": d}
        | ({"correction": DENY_TEXT} if d == "deny" else {})
        | ({"editedArguments": edited} if d == "edit" else {})
        for d in decided
    ]
    text = "\n".join(json.dumps(d) for d in lines_in) + "\n"
    proc, lines = _review(tmp_path, workspace, text, "--script", "flow")
    assert proc.returncode == 0, proc.stderr
    summary = DONE["arguments"]["summary"]
    finish = [line for line in lines if line["type"] == "proposal"][-1]
    assert finish["tool"] == "done" and finish["arguments"] == {"summary": summary}
    assert finish["description"] == f"finish the task: {summary}" and finish.get("diff") is None
    ends = [line for line in lines if line["type"] == "taskDone"]
    assert ends == [{"type": "taskDone", "taskId": lines[0]["taskId"], "summary": summary}]
    assert lines[-1]["type"] == "outcome" and lines[-1]["proposalId"] == finish["proposalId"]


def test_review_starts_with_the_files_in_view(workspace: Path, tmp_path: Path) -> None:
    proc, lines = _review(tmp_path, workspace, "", "--script", "flow", "--file", "src/calc/ops.py")
    assert proc.returncode == 0, proc.stderr
    assert lines[0]["type"] == "task" and in_view(tmp_path / "review.sqlite3") == [
        "src/calc/ops.py"
    ]
    missing, _ = _review(tmp_path, workspace, "", "--script", "flow", "--file", "nope.py")
    assert missing.returncode == 1
    assert "cannot start with nope.py in view: no such file: nope.py" in missing.stderr


def test_review_reads_stdin_and_writes_stdout(workspace: Path, tmp_path: Path) -> None:
    """`--decisions -` and no --out: stdout carries the JSON lines and nothing else."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.server.launch",
            "--review",
            "--store",
            str(tmp_path / "review.sqlite3"),
            "--task",
            "fix mean()",
            "--workspace",
            str(workspace),
            "--decisions",
            "-",
            "--script",
            "flow",
        ],
        cwd=REPO,
        input='# a comment, then one decision\n{"decision": "approve"}\n',
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [line["type"] for line in lines] == [
        "task",
        "proposal",
        "outcome",
        "proposal",
        "stopped",
    ]
    assert lines[-1]["pendingProposalId"] == lines[-2]["proposalId"]
    assert "decisions ran out" in proc.stderr


def test_responses_carry_the_state_when_notifications_wait(workspace: Path, tmp_path: Path) -> None:
    """A client that reads a response and the notification behind it in one read and
    processes only the response (Emacs 28's jsonrpc) still has every proposal: from the
    startTask and decide results, and from continual/pending."""
    store = tmp_path / "store.sqlite3"

    async def scenario() -> None:
        ed = Editor(workspace, understands_proposals=True)
        deferred: list[Any] = []
        handle = ed.client.protocol.handle_message

        def only_responses(message: Any) -> None:
            if getattr(message, "method", None) == "continual/proposal":
                deferred.append(message)  # stays unprocessed until released below
            else:
                handle(message)

        ed.client.protocol.handle_message = only_responses  # type: ignore[method-assign]
        try:
            await started(ed, store, "--script", "flow")
            task = await ed.request("continual/startTask", {"text": "fix mean()"})
            first = task["proposal"]
            assert first["taskId"] == task["taskId"] and first["tool"] == "edit_lines"
            assert "+    return sum(values) / len(values)" in first["diff"]
            pending = await ed.request("continual/pending", {})
            assert pending["proposals"] == [first]

            approved = await ed.request(
                "continual/decide", {"proposalId": first["proposalId"], "decision": "approve"}
            )
            second = approved["nextProposal"]
            assert second["proposalId"] == approved["nextProposalId"] != first["proposalId"]
            assert second["uri"].endswith("tests/test_ops.py")
            assert (await ed.request("continual/pending", {}))["proposals"] == [second]

            assert ed.notes["continual/proposal"] == []  # nothing came from a notification
            # The notifications were sent all the same, with the same payloads.
            await ed.wait_until(lambda: len(deferred) == 2)
            for message in deferred:
                handle(message)
            assert ed.notes["continual/proposal"] == [first, second]
        finally:
            await ed.stop()

    run(scenario)
