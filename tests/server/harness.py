"""A pygls LanguageClient that behaves like a small editor, for end-to-end tests.

It keeps buffers for the documents it opened, applies `workspace/applyEdit` to them
(and reports the change with didChange, as an editor does), records every notification
and answers showDocument / showMessageRequest / progress-create requests.

Two pygls pitfalls are handled here: lsprotocol's converter turns a CodeAction that
carries a command into a broken Command (fixed with a union hook), and the client never
reads the server's stderr (drained by a task, which also finds the TCP port).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Union

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient
from pygls.protocol import JsonRPCNotification, JsonRPCResponseMessage, default_converter

from continual_lsp.store import Store

REPO = Path(__file__).resolve().parents[2]


def client_converter() -> Any:
    converter = default_converter()

    def action_or_command(obj: Any, _: Any) -> Any:
        if isinstance(obj.get("command"), str):
            return converter.structure(obj, lsp.Command)
        return converter.structure(obj, lsp.CodeAction)

    converter.register_structure_hook(Union[lsp.Command, lsp.CodeAction], action_or_command)  # noqa: UP007
    # Custom notifications and untyped results as plain dicts, not namedtuples.
    converter.register_structure_hook(JsonRPCNotification, lambda obj, cls: cls(**obj))
    converter.register_structure_hook(JsonRPCResponseMessage, lambda obj, cls: cls(**obj))
    return converter


def apply_text_edits(text: str, edits: list[lsp.TextEdit]) -> str:
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(pos: lsp.Position) -> int:
        if pos.line >= len(lines):
            return len(text)
        return starts[pos.line] + pos.character

    for edit in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end) :]
    return text


class Editor:
    def __init__(self, root: Path, *, understands_proposals: bool = False) -> None:
        self.root = root
        self.understands_proposals = understands_proposals
        self.client = LanguageClient("test-editor", "1", converter_factory=client_converter)
        self.buffers: dict[str, str] = {}
        self.versions: dict[str, int] = {}
        self.notes: dict[str, list[Any]] = defaultdict(list)
        self.shown: list[str] = []
        self.message_requests: list[Any] = []
        self.message_choice: Callable[[Any], str | None] = lambda params: None
        self.refuse_edits = False
        self.stderr: list[str] = []
        self._changed = asyncio.Event()
        self._process: asyncio.subprocess.Process | None = None
        self._drain: asyncio.Task[None] | None = None
        self.order: list[tuple[str, Any]] = []  # ("response", result) / ("notify", method)
        self._register()
        handle = self.client.protocol.handle_message

        def logged(message: Any) -> None:
            if hasattr(message, "result"):
                self.order.append(("response", message.result))
            elif hasattr(message, "method") and not hasattr(message, "id"):
                self.order.append(("notify", message.method))
            handle(message)

        self.client.protocol.handle_message = logged  # type: ignore[method-assign]

    # -- server → client ------------------------------------------------------------------

    def _register(self) -> None:
        c = self.client

        def record(method: str) -> None:
            @c.feature(method)
            def _(params: Any) -> None:
                self.notes[method].append(params)
                self._changed.set()

        for method in (
            "continual/proposal",
            "continual/learned",
            "continual/routed",
            "continual/taskDone",
            lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS,
            lsp.WINDOW_SHOW_MESSAGE,
            lsp.WINDOW_LOG_MESSAGE,
            lsp.PROGRESS,
        ):
            record(method)

        @c.feature(lsp.WORKSPACE_APPLY_EDIT)
        def apply_edit(params: lsp.ApplyWorkspaceEditParams) -> lsp.ApplyWorkspaceEditResult:
            if self.refuse_edits:
                return lsp.ApplyWorkspaceEditResult(applied=False, failure_reason="refused by test")
            self.apply_workspace_edit(params.edit)
            return lsp.ApplyWorkspaceEditResult(applied=True)

        @c.feature(lsp.WINDOW_SHOW_DOCUMENT)
        def show_document(params: lsp.ShowDocumentParams) -> lsp.ShowDocumentResult:
            self.shown.append(params.uri)
            self._changed.set()
            return lsp.ShowDocumentResult(success=True)

        @c.feature(lsp.WINDOW_SHOW_MESSAGE_REQUEST)
        def show_message_request(params: lsp.ShowMessageRequestParams) -> Any:
            self.message_requests.append(params)
            self._changed.set()
            title = self.message_choice(params)
            return None if title is None else lsp.MessageActionItem(title=title)

        @c.feature(lsp.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def create_progress(params: Any) -> None:
            return None

    def apply_workspace_edit(self, edit: lsp.WorkspaceEdit) -> None:
        changes: list[tuple[str, list[lsp.TextEdit]]] = []
        for doc_change in edit.document_changes or []:
            if isinstance(doc_change, lsp.TextDocumentEdit):
                changes.append((doc_change.text_document.uri, list(doc_change.edits)))
        for uri, edits in (edit.changes or {}).items():
            changes.append((uri, list(edits)))
        for uri, edits in changes:
            if uri not in self.buffers:
                raise AssertionError(f"edit for a document that is not open: {uri}")
            self.change(uri, apply_text_edits(self.buffers[uri], edits))

    # -- lifecycle ------------------------------------------------------------------------

    async def start_stdio(
        self, store: Path, *extra: str, env: dict[str, str] | None = None
    ) -> None:
        await self.client.start_io(
            sys.executable,
            "-m",
            "tests.server.launch",
            "--store",
            str(store),
            *extra,
            cwd=str(REPO),
            env={**os.environ, **(env or {})},
        )
        self._process = self.client._server
        assert self._process is not None and self._process.stderr is not None
        self._drain = asyncio.create_task(self._drain_stderr(self._process.stderr))

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.stderr.append(line.decode(errors="replace").rstrip())

    async def start_tcp(self, port: int) -> None:
        await self.client.start_tcp("127.0.0.1", port)

    async def initialize(self, **options: Any) -> lsp.InitializeResult:
        if self.understands_proposals:
            options.setdefault("continualProposals", True)
        result = await self.client.initialize_async(
            lsp.InitializeParams(
                process_id=os.getpid(),
                root_uri=self.root.as_uri(),
                capabilities=lsp.ClientCapabilities(
                    workspace=lsp.WorkspaceClientCapabilities(
                        apply_edit=True,
                        workspace_edit=lsp.WorkspaceEditClientCapabilities(document_changes=True),
                    ),
                    window=lsp.WindowClientCapabilities(
                        work_done_progress=True,
                        show_document=lsp.ShowDocumentClientCapabilities(support=True),
                    ),
                ),
                initialization_options=options or None,
            )
        )
        self.client.initialized(lsp.InitializedParams())
        return result

    async def stop(self, quiet: bool = False) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.shutdown_async(None), 10)
            self.client.exit(None)
        if self._process is not None:
            try:
                await asyncio.wait_for(self._process.wait(), 10)
            except TimeoutError:
                self._process.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.stop(), 5)
        if self._drain is not None:
            self._drain.cancel()
        # pytest shows captured stderr only when a test fails: then the server's log helps.
        if not quiet:
            print("\n".join(self.stderr), file=sys.stderr)

    # -- documents ------------------------------------------------------------------------

    def uri(self, rel: str) -> str:
        return (self.root / rel).resolve().as_uri()

    def open(self, rel_or_uri: str) -> str:
        uri = rel_or_uri if rel_or_uri.startswith("file:") else self.uri(rel_or_uri)
        path = Path(uri.removeprefix("file://"))
        self.buffers[uri] = path.read_text()
        self.versions[uri] = 1
        self.client.text_document_did_open(
            lsp.DidOpenTextDocumentParams(
                text_document=lsp.TextDocumentItem(
                    uri=uri, language_id="python", version=1, text=self.buffers[uri]
                )
            )
        )
        return uri

    def change(self, uri: str, text: str) -> None:
        self.buffers[uri] = text
        self.versions[uri] += 1
        self.client.text_document_did_change(
            lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(
                    uri=uri, version=self.versions[uri]
                ),
                content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    def save(self, uri: str, text: str | None = None) -> None:
        """Write the buffer (or `text`) to disk and send didSave, as `:w` does."""
        if text is not None:
            if uri not in self.buffers:
                self.open(uri)
            self.change(uri, text)
        Path(uri.removeprefix("file://")).write_text(self.buffers[uri])
        self.client.text_document_did_save(
            lsp.DidSaveTextDocumentParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri), text=self.buffers[uri]
            )
        )

    # -- requests -------------------------------------------------------------------------

    async def request(self, method: str, params: Any = None, timeout: float = 120) -> Any:
        return await asyncio.wait_for(
            self.client.protocol.send_request_async(method, params), timeout
        )

    async def raw_request(self, method: str, params: Any, timeout: float = 30) -> Any:
        """Send params as given (no client-side typing), for malformed-input tests."""
        from concurrent.futures import Future

        msg_id = f"raw-{len(self.notes['_raw'])}"
        self.notes["_raw"].append(msg_id)
        future: Future[Any] = Future()
        self.client.protocol._request_futures[msg_id] = future
        body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        writer = self.client.protocol.writer
        assert writer is not None
        data = f"Content-Length: {len(body.encode())}\r\n\r\n{body}".encode()
        result = writer.write(data)
        if asyncio.iscoroutine(result):
            await result
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout)

    async def command(self, command: str, *args: Any, timeout: float = 120) -> Any:
        return await asyncio.wait_for(
            self.client.workspace_execute_command_async(
                lsp.ExecuteCommandParams(command=command, arguments=list(args))
            ),
            timeout,
        )

    async def code_actions(self, uri: str, line: int) -> list[lsp.CodeAction]:
        result = await self.client.text_document_code_action_async(
            lsp.CodeActionParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri),
                range=lsp.Range(
                    start=lsp.Position(line=line, character=0),
                    end=lsp.Position(line=line, character=0),
                ),
                context=lsp.CodeActionContext(diagnostics=[]),
            )
        )
        return [a for a in result or [] if isinstance(a, lsp.CodeAction)]

    async def wait_for(
        self, method: str, predicate: Callable[[Any], bool] = lambda _: True, timeout: float = 120
    ) -> Any:
        """The first notification of `method` (seen so far or to come) matching `predicate`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen = 0
        while True:
            items = self.notes[method]
            for item in items[seen:]:
                if predicate(item):
                    return item
            seen = len(items)
            self._changed.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                tail = "\n".join(self.stderr[-30:])
                raise TimeoutError(f"no {method} within {timeout}s; server stderr:\n{tail}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    async def wait_until(self, check: Callable[[], Any], timeout: float = 30) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = check()
            if value:
                return value
            if loop.time() > deadline:
                tail = "\n".join(self.stderr[-30:])
                raise TimeoutError(f"condition not met within {timeout}s; stderr:\n{tail}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), 0.1)

    def diagnostics(self, uri: str) -> list[lsp.Diagnostic]:
        for params in reversed(self.notes[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]):
            if params.uri == uri:
                return list(params.diagnostics)
        return []


async def start_tcp_server(
    store: Path, token_arg: str, *extra: str, env: dict[str, str] | None = None
) -> tuple[asyncio.subprocess.Process, int, list[str]]:
    """Start `launch --tcp 127.0.0.1:0`; returns the process, its port and its stderr lines."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.server.launch",
        "--store",
        str(store),
        "--tcp",
        "127.0.0.1:0",
        "--token",
        token_arg,
        *extra,
        cwd=str(REPO),
        env={**os.environ, **(env or {})},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    lines: list[str] = []
    port = None
    while port is None:
        raw = await asyncio.wait_for(process.stderr.readline(), 60)
        if not raw:
            raise RuntimeError("TCP server exited:\n" + "\n".join(lines))
        line = raw.decode(errors="replace").rstrip()
        lines.append(line)
        if match := re.search(r"listening on [\d.]+:(\d+)", line):
            port = int(match.group(1))

    async def drain() -> None:
        assert process.stderr is not None
        while line := await process.stderr.readline():
            lines.append(line.decode(errors="replace").rstrip())

    asyncio.get_running_loop().create_task(drain())
    return process, port, lines


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def decisions(store_path: Path) -> dict[str, dict[str, Any]]:
    """Every recorded decision, by proposal id, in the order they were made (the primary
    key's index would give them in proposal-id order)."""
    store = Store(store_path)
    try:
        rows = store._query("SELECT proposal_id FROM decisions ORDER BY rowid")
        return {r[0]: store.decision(r[0]) for r in rows}  # type: ignore[misc]
    finally:
        store.close()


def in_view(store_path: Path) -> list[str]:
    """The files tasks started with in view (`continual/startTask` files), in order."""
    store = Store(store_path)
    try:
        return [e["payload"]["path"] for e in store.events(kind="in_view")]
    finally:
        store.close()


def task_ends(store_path: Path) -> list[str]:
    """The summaries the store holds for the tasks that ended, in order."""
    store = Store(store_path)
    try:
        return [e["payload"]["summary"] for e in store.events(kind="task_status")]
    finally:
        store.close()


def run_editor(
    argv: list[str], cwd: Path, env: dict[str, str], report: Path, timeout: float
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run a headless editor script to its end; its JSON report ({} if none was written)."""
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return proc, (json.loads(report.read_text()) if report.exists() else {})


def editor_env(
    workspace: Path, home: Path, report: Path, server: list[str], **extra: str
) -> dict[str, str]:
    """For a real editor (Neovim, Emacs) that starts the server itself: a private HOME, but
    the model cache is shared (without it every server would dequantise the GGUF again,
    ~20 s)."""
    from continual_lsp.policy.model_files import cache_dir

    return {
        **os.environ,
        "CONTINUAL_WS": str(workspace),
        "CONTINUAL_OUT": str(report),
        "CONTINUAL_CMD": json.dumps(server),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "HOME": str(home),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_DATA_HOME": str(home / "data"),
        "CONTINUAL_LSP_CACHE": str(cache_dir().parent),
        **extra,
    }
