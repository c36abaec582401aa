"""The main job (README command 1): a scripted reviewer works with the agent through the
real language server over stdio, exactly as an editor would.

It starts `continual-lsp serve` as a child process, connects pygls' LanguageClient,
starts a task on a copy of the sample workspace, and then reviews each proposal the way
a reviewer would: the first change is denied with a correction (an SDPO step runs and the
retry is chosen under the new adapter). If that change was not the fix, the correction
names the line and the operator; if the agent fixed the bug at once, the correction is a
project preference (the other of `edit` and `edit_lines`), so the denial still changes
what the agent does next. A retry that follows the correction and fixes the bug
is approved; otherwise the reviewer edits it (the edit is the demonstration). Changes
nobody asked for are turned down until the task ends or the demo's budget is spent.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from continual_lsp.config import Settings
from continual_lsp.protocol import (
    METHOD_DECIDE,
    METHOD_LEDGER,
    METHOD_START_TASK,
    METHOD_STATUS,
    NOTIFY_LEARNED,
    NOTIFY_PROPOSAL,
    NOTIFY_ROUTED,
    NOTIFY_TASK_DONE,
)
from continual_lsp.text import changed_lines

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample-workspace"
FIX = {
    "tool": "edit_lines",
    "path": "src/calc/ops.py",
    "start": 7,
    "end": 7,
    "content": "    return sum(values) / len(values)",
}
FIXED = "mean() is fixed now; leave the rest of the file as it is."
BUG_LINE = "    return sum(values) // len(values)"
# The demo narrows the decoding grammar to `read` and the file-changing tools (the
# `allowed_tools` setting), so every turn the reviewer sees is a change to review (reads
# are approved without asking, the default).
DEMO_TOOLS = "read,edit_lines,edit,write"
# The demo's task ends as any task does: the agent says `done` and the reviewer finishes it.
DEMO_ANSWERS = DEMO_TOOLS + ",done"
# The file the scripted reviewer "has open": the task starts with it in view, as it does
# from an editor (`continual/startTask` files).
IN_VIEW = "src/calc/ops.py"
WRONG_CHANGE = (
    "That is not the bug. Change only line 7 of src/calc/ops.py, the return: use / instead of //."
)
# When the agent fixed the bug at once, the reviewer asks for the project's way, which is
# the other of the two line-changing tools: {tool the agent used: (correction, wanted)}.
PREFERENCES = {
    "edit": (
        "Use edit_lines with the line number here, not edit: our reviewers comment on "
        "line ranges in this repository.",
        "edit_lines",
    ),
    "other": (
        "Use edit with the exact old line and its replacement here, not edit_lines: "
        "line numbers drift in this repository.",
        "edit",
    ),
}


def preference(tool: str) -> tuple[str, str]:
    """(the correction, the tool it asks for) for a fix made with `tool`."""
    return PREFERENCES.get(tool, PREFERENCES["other"])


def fixes_the_bug(proposal: dict[str, Any]) -> bool:
    """The change replaces exactly the buggy line with the fixed one."""
    removed, added = changed_lines(proposal.get("diff") or "")
    return removed == [BUG_LINE] and added == [FIX["content"]]


def _plain(value: Any) -> Any:
    """pygls hands untyped params over as namedtuples; make them JSON again."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _say(text: str = "") -> None:
    print(text, flush=True)


def _show_proposal(p: dict[str, Any]) -> None:
    weights = p.get("adapterVersion") or "the shipped weights, no reviewer adapter yet"
    _say(f"\n▶ proposal {p['proposalId']}  tool={p['tool']}  (sampled from {weights})")
    _say("  arguments: " + json.dumps(p["arguments"])[:400])
    if p.get("note"):
        _say(f"  note: {p['note']}")
    if p.get("diff"):
        _say("  diff:")
        for line in p["diff"].splitlines()[:30]:
            _say("    " + line)


async def _next_proposal(
    proposals: asyncio.Queue[dict[str, Any]], done: asyncio.Event, timeout: float
) -> dict[str, Any] | None:
    """The next proposal, or None once the task is done (or after `timeout` seconds).

    `taskDone` may arrive just after the decision that ended the task was answered, so
    waiting on the queue alone would wait the whole timeout for a proposal that never comes.
    """
    if not proposals.empty():
        return proposals.get_nowait()
    get = asyncio.ensure_future(proposals.get())
    finished = asyncio.ensure_future(done.wait())
    await asyncio.wait({get, finished}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finished.cancel()
    if get.done():
        return get.result()
    get.cancel()
    return None


async def _demo(settings: Settings, task: str, workspace: Path, store: Path) -> int:
    from lsprotocol import types as lsp

    proposals: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    done = asyncio.Event()
    client = _client(proposals, done)
    args = ["-m", "continual_lsp", "serve", "--store", str(store), "--model", settings.model]
    if not settings.enable_training:
        args.append("--no-training")
    env = {**os.environ, "CONTINUAL_LSP_ALLOWED_TOOLS": DEMO_ANSWERS}
    await client.start_io(sys.executable, *args, cwd=str(workspace), env=env)
    assert client._server is not None and client._server.stderr is not None
    stderr = client._server.stderr

    async def _drain() -> None:
        # pygls never reads the server's stderr; a full pipe would block the server.
        while line := await stderr.readline():
            if os.environ.get("CONTINUAL_DEMO_VERBOSE"):
                sys.stderr.write("  [server] " + line.decode(errors="replace"))

    drain = asyncio.create_task(_drain())
    await client.initialize_async(
        lsp.InitializeParams(
            process_id=os.getpid(),
            root_uri=workspace.as_uri(),
            capabilities=lsp.ClientCapabilities(
                experimental={"continualProposals": True},
                window=lsp.WindowClientCapabilities(work_done_progress=True),
            ),
            initialization_options={"continualProposals": True},
        )
    )
    client.initialized(lsp.InitializedParams())
    _say(
        f"workspace: {workspace}\nstore:     {store}\ntask:      {task}\n"
        f"tools:     {DEMO_ANSWERS.replace(',', ', ')} (the demo narrows the grammar to these)"
    )
    files = [IN_VIEW] if (workspace / IN_VIEW).is_file() else []
    if files:
        _say(f"in view:   {IN_VIEW} (the file the reviewer has open; read before the first turn)")
    started = time.monotonic()
    params = {"text": task, "files": files}
    result = _plain(await client.protocol.send_request_async(METHOD_START_TASK, params))
    _say(f"task {result['taskId']} started")

    await _review(client, proposals, done)
    await _report(client, workspace)
    _say(f"demo took {time.monotonic() - started:.1f} s")
    await client.shutdown_async(None)
    client.exit(None)
    await asyncio.sleep(0.2)
    drain.cancel()
    await client.stop()
    return 0


def _client(proposals: asyncio.Queue[dict[str, Any]], done: asyncio.Event) -> Any:
    """A pygls client that queues proposals and narrates every other notification."""
    from lsprotocol import types as lsp
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("continual-demo", "0.1")

    @client.feature(NOTIFY_PROPOSAL)
    def _on_proposal(params: Any) -> None:
        proposals.put_nowait(_plain(params))

    @client.feature(NOTIFY_LEARNED)
    def _on_learned(params: Any) -> None:
        p = _plain(params)
        _say(
            f"  ✎ learned: step {p['step']}, loss {p['loss']:.4f}, {p['seconds']:.1f} s"
            f" → adapter {p.get('adapterVersion')}"
        )

    @client.feature(NOTIFY_ROUTED)
    def _on_routed(params: Any) -> None:
        p = _plain(params)
        _say(f"  ↳ routed to {p['lane']}: {p['reason']}")

    @client.feature(NOTIFY_TASK_DONE)
    def _on_done(params: Any) -> None:
        _say(f"\n■ task done: {_plain(params)['summary']}")
        done.set()

    @client.feature(lsp.WINDOW_WORK_DONE_PROGRESS_CREATE)
    def _on_progress_create(params: lsp.WorkDoneProgressCreateParams) -> None:
        return None

    @client.feature(lsp.PROGRESS)
    def _on_progress(params: lsp.ProgressParams) -> None:
        value = _plain(params.value)
        if isinstance(value, dict) and value.get("kind") in ("begin", "end"):
            text = value.get("title") or value.get("message") or ""
            _say(f"  … {value['kind']}: {text}")

    @client.feature(lsp.WINDOW_LOG_MESSAGE)
    def _on_log(params: lsp.LogMessageParams) -> None:
        print(f"  [server] {params.message}", file=sys.stderr, flush=True)

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def _on_diagnostics(params: lsp.PublishDiagnosticsParams) -> None:
        """The demo prints each proposal's diff itself; an editor would show these."""

    return client


async def _decide(client: Any, params: dict[str, Any]) -> None:
    outcome = _plain(await client.protocol.send_request_async(METHOD_DECIDE, params))
    if outcome.get("learned"):
        learned = outcome["learned"]
        _say(f"  decide → learned step {learned['step']} (loss {learned['loss']:.4f})")


async def _review(
    client: Any, proposals: asyncio.Queue[dict[str, Any]], done: asyncio.Event
) -> None:
    # The first change is denied with a correction; the retry is approved if it follows
    # the correction and fixes the bug, else edited; later changes are turned down.
    first = await _next_proposal(proposals, done, timeout=600)
    if first is not None:
        _show_proposal(first)
        if fixes_the_bug(first):
            correction, wanted = preference(first["tool"])
            _say("  (the agent fixed the bug at once; the reviewer asks for the project's way)")

            def follows(p: dict[str, Any]) -> bool:
                return p["tool"] == wanted and fixes_the_bug(p)
        else:
            correction, follows = WRONG_CHANGE, fixes_the_bug
        _say(f"  ✗ deny: {correction}")
        await _decide(client, {"proposalId": first["proposalId"], "decision": "deny",
                               "correction": correction})  # fmt: skip
        retry = await _next_proposal(proposals, done, timeout=600)
        if retry is not None:
            _show_proposal(retry)
            if follows(retry):
                _say("  ✓ the retry follows the correction: approve")
                await _decide(client, {"proposalId": retry["proposalId"], "decision": "approve"})
            else:
                _say("  ✎ the retry does not follow the correction; edit → " + json.dumps(FIX))
                await _decide(client, {"proposalId": retry["proposalId"], "decision": "edit",
                                       "editedArguments": FIX})  # fmt: skip
    for _ in range(2):  # the bug is fixed: a reviewer turns down further changes
        proposal = await _next_proposal(proposals, done, timeout=600)
        if proposal is None:
            break
        _show_proposal(proposal)
        if proposal["tool"] == "done":
            _say("  ✓ finish task")
            await _decide(client, {"proposalId": proposal["proposalId"], "decision": "approve"})
            break
        _say(f"  ✗ deny: {FIXED}")
        await _decide(client, {"proposalId": proposal["proposalId"], "decision": "deny",
                               "correction": FIXED})  # fmt: skip


async def _report(client: Any, workspace: Path) -> None:
    ledger = _plain(await client.protocol.send_request_async(METHOD_LEDGER, {}))
    status = _plain(await client.protocol.send_request_async(METHOD_STATUS, {}))
    _say("\nledger:")
    for item in ledger["items"]:
        _say(f"  [{item['lane']}] {item['text'][:70]!r} — {item['reason']}")
    _say(
        f"  context tokens carried: {ledger['contextTokens']}"
        f" vs notes-only: {ledger['notesOnlyTokens']}"
    )
    _say(
        f"status: backend={status['backend']} adapter={status.get('adapterVersion')}"
        f" steps={status['trainingSteps']} queue={status['queueDepth']}"
    )
    _say(f"\nsrc/calc/ops.py now:\n{(workspace / 'src/calc/ops.py').read_text()}")


def run_demo(settings: Settings, task: str, workspace: str | None = None) -> int:
    root = Path(tempfile.mkdtemp(prefix="continual-demo-"))
    ws = Path(workspace) if workspace else root / "workspace"
    if workspace is None:
        shutil.copytree(SAMPLE, ws)
    store = Path(settings.store_path) if settings.store_path else root / "store.sqlite3"
    return asyncio.run(_demo(settings, task, ws.resolve(), store))
