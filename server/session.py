"""Per-connection state: the agent handle, pending proposals ↔ documents, files opened for
the reviewer (corrections, edits, diffs), applied regions (manual-edit signals), progress.

Everything here runs on the event loop. Blocking Agent calls go through `call()`, which
runs them on the server's thread pool; agent events arrive through `post()` from any
thread and are replayed in order by one pump task.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException, JsonRpcInternalError
from pygls.uris import from_fs_path, to_fs_path

from continual_lsp.config import Settings
from continual_lsp.protocol import (
    NOTIFY_LEARNED,
    NOTIFY_PROPOSAL,
    NOTIFY_ROUTED,
    NOTIFY_TASK_DONE,
    DecideResult,
    ProposalNotification,
)
from continual_lsp.store import default_store_path

from .agents import AgentHandle, AgentPool
from .edits import (
    EditError,
    edited_command_arguments,
    edited_file_arguments,
    edited_json_arguments,
)
from .errors import RequestFailed, agent_error
from .hunks import HunkVotes, hunk_diagnostics
from .text import line_edit, line_position, proposal_message, unified_diff

if TYPE_CHECKING:
    from continual_lsp.agent.session import Agent, Proposal

    from .app import ContinualServer

log = logging.getLogger(__name__)
T = TypeVar("T")

FILE_TOOLS = ("write", "edit", "edit_lines")
PROGRESS_CREATE_S = 5.0
# Initialization option / experimental capability by which a client says it renders
# `continual/proposal` itself (the VS Code extension, the Neovim module); without it
# non-file proposals are also offered through window/showMessageRequest.
CAPABILITY = "continualProposals"
CORRECTION_HEADER = (
    "<!-- continual: write your correction for proposal {pid} below, then save this file.\n"
    "     {message}\n"
    "     Text inside this comment is ignored; saving with no text sends nothing. -->\n\n"
)


def normalize_uri(uri: str) -> str:
    """One spelling per file (clients differ in percent-encoding and symlinks)."""
    path = to_fs_path(uri)
    if path is None:
        return uri
    return from_fs_path(str(Path(path).resolve())) or uri


def state_dir(settings: Settings) -> Path:
    """Per-user folder beside the user's store for correction, edit and diff files."""
    store = Path(settings.store_path) if settings.store_path else default_store_path(settings.user)
    return store.parent / f"{store.stem}.d"


def strip_correction(text: str) -> str:
    """The reviewer's words: the file minus the instruction comment."""
    start = text.find("<!--")
    end = text.find("-->", start)
    if start != -1 and end != -1:
        text = text[:start] + text[end + 3 :]
    return text.strip()


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


@dataclass
class OpenedFile:
    kind: str  # "corrections" | "edits" | "diffs" (also the folder name)
    proposal_id: str
    path: Path


@dataclass
class AppliedRegion:
    """Lines a proposal just wrote; a reviewer change there soon after is an edit signal."""

    proposal_id: str
    content: str
    start: int  # 0-based first changed line in `content`
    end: int  # exclusive
    at: float = field(default_factory=time.monotonic)
    timer: asyncio.TimerHandle | None = None
    recorded: str | None = None  # the diff last recorded, so a burst records once


class Session:
    def __init__(
        self,
        ls: ContinualServer,
        settings: Settings,
        pool: AgentPool,
        executor: Executor,
        *,
        user: str,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.ls = ls
        self.settings = settings
        self.user = user
        self._pool = pool
        self._executor = executor
        self._on_close = on_close
        self.loop = asyncio.get_running_loop()
        self.handle: AgentHandle | None = None
        self.workspace: Path | None = None
        self.default_workspace: Path | None = None  # stdio: the working directory
        self.understands_proposals = False
        self.proposals: dict[str, Proposal] = {}
        self._shown: set[str] = set()  # ids ever shown: a late duplicate must not revive one
        self._diag_uri: dict[str, str] = {}  # proposal id → uri its diagnostic is on
        self.files: dict[str, OpenedFile] = {}  # uri → file the server opened
        self.applied: dict[str, AppliedRegion] = {}  # uri → region
        self._events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._held: list[tuple[str, Any]] = []
        self._holds = 0
        self._progress: dict[str, bool] = {}  # token → created on the client
        self._decide_lock = asyncio.Lock()
        self.hunk_votes = HunkVotes()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stop = asyncio.Event()
        self._pump = self.spawn(self._pump_events())
        self.closed = False

    # -- lifecycle -------------------------------------------------------------------------

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """A background task whose failure is logged to the client, never lost."""
        task = self.loop.create_task(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                self.log_error(f"background task failed: {t.exception()}")

        task.add_done_callback(done)
        return task

    def attach(self, workspace: Path) -> None:
        self.workspace = workspace.resolve()
        self.handle = self._pool.acquire(self.settings, self.workspace, self)
        self.spawn(self._watch())

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop.set()
        if self.handle is not None:
            self._pool.release(self.handle, self)
        for task in list(self._tasks):
            task.cancel()
        for region in self.applied.values():
            if region.timer:
                region.timer.cancel()
        if self._on_close:
            self._on_close()

    # -- agent access ----------------------------------------------------------------------

    def _require_handle(self) -> AgentHandle:
        if self.handle is None:
            raise RequestFailed("the server is not initialized: send initialize first")
        return self.handle

    async def agent(self) -> Agent:
        try:
            return await self._require_handle().agent()
        except JsonRpcException:
            raise
        except Exception as exc:
            raise RequestFailed(f"the agent could not start: {exc}") from exc

    async def ready_agent(self) -> Agent:
        try:
            return await self._require_handle().ready_agent()
        except JsonRpcException:
            raise
        except Exception as exc:
            raise RequestFailed(f"the agent could not start: {exc}") from exc

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking Agent call on the thread pool; its errors become JSON-RPC errors."""
        try:
            return await self.loop.run_in_executor(self._executor, partial(fn, *args, **kwargs))
        except JsonRpcException:
            raise
        except Exception as exc:
            error = agent_error(exc)
            if isinstance(error, JsonRpcInternalError):
                log.exception("agent call %s failed", getattr(fn, "__name__", fn))
            raise error from exc

    # -- events from the agent (any thread) ------------------------------------------------

    def post(self, kind: str, payload: Any) -> None:
        if not self.closed:
            with contextlib.suppress(RuntimeError):  # the loop closed under an agent thread
                self.loop.call_soon_threadsafe(self._events.put_nowait, (kind, payload))

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Hold proposal/taskDone notifications until the current response is written.

        `continual/startTask` answers `{taskId, proposal}` and the notification repeats
        the proposal: the agent announces it before its call returns, so without holding
        it the client would see a proposal for a task id it does not know yet.
        """
        self._holds += 1
        try:
            yield
        finally:
            # Two hops: the handler's result is sent by a done-callback scheduled when the
            # handler's task finishes, i.e. after the first hop and before the second.
            self.loop.call_soon(self.loop.call_soon, self._release)

    def _release(self) -> None:
        self._holds -= 1
        if self._holds == 0:
            held, self._held = self._held, []
            for event in held:
                self._events.put_nowait(event)

    def announce(self, proposal: Proposal) -> None:
        """Show a proposal an Agent call returned, after the response (see `holding`)."""
        self._events.put_nowait(("proposal", proposal))

    async def _pump_events(self) -> None:
        while True:
            kind, payload = await self._events.get()
            if self._holds and kind in ("proposal", "taskDone"):
                self._held.append((kind, payload))
                continue
            try:
                await self._dispatch(kind, payload)
            except Exception as exc:
                log.exception("dispatching %s failed", kind)
                self.log_error(f"could not deliver {kind}: {exc}")

    async def _dispatch(self, kind: str, payload: Any) -> None:
        if kind == "proposal":
            await self.show_proposal(payload)
        elif kind == "learned":
            self.ls.protocol.notify(NOTIFY_LEARNED, payload.dump())
        elif kind == "routed":
            self.ls.protocol.notify(NOTIFY_ROUTED, payload.dump())
        elif kind == "taskDone":
            for pid in [p.id for p in self.proposals.values() if p.task_id == payload.task_id]:
                self.forget(pid)
            self.ls.protocol.notify(NOTIFY_TASK_DONE, payload.dump())
        elif kind == "progress":
            await self._report_progress(*payload)

    # -- proposals on documents ------------------------------------------------------------

    def notification(self, proposal: Proposal) -> ProposalNotification:
        assert self.workspace is not None
        return proposal.notification(self.workspace)

    def proposal_uri(self, proposal: Proposal) -> str | None:
        if proposal.call.tool not in FILE_TOOLS or proposal.preview is None:
            return None
        uri = self.notification(proposal).uri
        return normalize_uri(uri) if uri else None

    async def show_proposal(self, proposal: Proposal) -> None:
        if proposal.id in self._shown:
            return  # announced twice (listener and return value): show once
        self._shown.add(proposal.id)
        # The agent keeps one pending proposal per task: a new one replaces the old.
        for old in [p.id for p in self.proposals.values() if p.task_id == proposal.task_id]:
            self.forget(old)
        self.proposals[proposal.id] = proposal
        note = self.notification(proposal)
        self.ls.protocol.notify(NOTIFY_PROPOSAL, note.dump())
        uri = self.proposal_uri(proposal)
        if uri is not None:
            self._diag_uri[proposal.id] = uri
            self.publish(uri)
            if not self.understands_proposals and uri not in self.open_uris():
                self.spawn(self._reveal(uri, note))
        elif not proposal.read_only and not self.understands_proposals:
            self.spawn(self._ask(proposal))

    def forget(self, proposal_id: str) -> None:
        self.proposals.pop(proposal_id, None)
        self.hunk_votes.forget(proposal_id)
        uri = self._diag_uri.pop(proposal_id, None)
        if uri is not None:
            self.publish(uri)

    def open_uris(self) -> set[str]:
        try:
            return {normalize_uri(u) for u in self.ls.workspace.text_documents}
        except RuntimeError:  # not initialized
            return set()

    def buffer_text(self, uri: str) -> str | None:
        """The client's text of an open document, else None."""
        for raw in self.ls.workspace.text_documents:
            if normalize_uri(raw) == uri:
                return self.ls.workspace.get_text_document(raw).source
        return None

    def raw_uri(self, uri: str) -> str:
        """The spelling the client used for an open document (applyEdit must match it)."""
        for raw in self.ls.workspace.text_documents:
            if normalize_uri(raw) == uri:
                return raw
        return uri

    def diagnostics_for(self, uri: str) -> list[lsp.Diagnostic]:
        out = []
        for pid, diag_uri in self._diag_uri.items():
            proposal = self.proposals.get(pid)
            if diag_uri != uri or proposal is None:
                continue
            note = self.notification(proposal)
            rng = note.range
            start = (rng.start.line, 0) if rng else (0, 0)
            end = (rng.end.line, rng.end.character) if rng else (0, 0)
            out.append(
                lsp.Diagnostic(
                    range=lsp.Range(
                        start=lsp.Position(line=start[0], character=start[1]),
                        end=lsp.Position(line=end[0], character=min(end[1], 10_000)),
                    ),
                    message=proposal_message(
                        proposal.call.tool, proposal.call.arguments, proposal.note
                    ),
                    severity=lsp.DiagnosticSeverity.Information,
                    source="continual",
                    code=pid,
                    data={"proposalId": pid},
                )
            )
            if len(proposal.hunks()) > 1:
                out.extend(hunk_diagnostics(proposal, self.hunk_votes.decided(pid)))
        return out

    def publish(self, uri: str) -> None:
        self.ls.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(
                uri=self.raw_uri(uri), diagnostics=self.diagnostics_for(uri)
            )
        )

    def proposals_at(self, uri: str, rng: lsp.Range) -> list[Proposal]:
        """Pending file proposals on `uri` whose changed lines meet `rng`."""
        found = []
        for pid, diag_uri in self._diag_uri.items():
            proposal = self.proposals.get(pid)
            if diag_uri != uri or proposal is None:
                continue
            prange = self.notification(proposal).range
            first, last = (prange.start.line, prange.end.line) if prange else (0, 0)
            if rng.start.line <= last and first <= rng.end.line:
                found.append(proposal)
        return found

    def workspace_edit(
        self, uri: str, before: str, after: str, version: int | None
    ) -> lsp.WorkspaceEdit:
        """A WorkspaceEdit turning `before` (the client's buffer) into `after`."""
        change = line_edit(before, after)
        units = self.ls.workspace.position_codec.client_num_units
        start = line_position(before, change.start, units)
        end = line_position(before, change.old_end, units)
        edit = lsp.TextEdit(
            range=lsp.Range(
                start=lsp.Position(line=start[0], character=start[1]),
                end=lsp.Position(line=end[0], character=end[1]),
            ),
            new_text=change.text,
        )
        raw = self.raw_uri(uri)
        caps = self.ls.client_capabilities.workspace
        if caps and caps.workspace_edit and caps.workspace_edit.document_changes:
            # A versioned edit is refused by the client if the buffer moved on meanwhile.
            return lsp.WorkspaceEdit(
                document_changes=[
                    lsp.TextDocumentEdit(
                        text_document=lsp.OptionalVersionedTextDocumentIdentifier(
                            uri=raw, version=version
                        ),
                        edits=[edit],
                    )
                ]
            )
        return lsp.WorkspaceEdit(changes={raw: [edit]})

    def doc_version(self, uri: str) -> int | None:
        for raw, doc in self.ls.workspace.text_documents.items():
            if normalize_uri(raw) == uri:
                return doc.version
        return None

    async def apply(
        self, uri: str, before: str, after: str, label: str, *, versioned: bool = True
    ) -> None:
        """Change the client's buffer from `before` to `after`. Versioned: at the version
        the server last saw, so a client whose buffer moved on refuses it."""
        version = self.doc_version(uri) if versioned else None
        edit = self.workspace_edit(uri, before, after, version)
        try:
            result = await self.ls.workspace_apply_edit_async(
                lsp.ApplyWorkspaceEditParams(edit=edit, label=label)
            )
        except Exception as exc:
            raise RequestFailed(f"the editor could not apply the edit: {exc}") from exc
        if not result.applied:
            reason = result.failure_reason or "no reason given"
            raise RequestFailed(f"the editor refused the edit ({reason}); nothing was recorded")

    # -- decisions -------------------------------------------------------------------------

    async def lookup(self, proposal_id: str) -> Proposal:
        if not isinstance(proposal_id, str) or not proposal_id:
            raise RequestFailed("a proposal id is required")
        proposal = self.proposals.get(proposal_id)
        if proposal is None:
            agent = await self.agent()
            proposal = await self.call(agent.proposal, proposal_id)
        if proposal is None:
            raise RequestFailed(f"unknown proposal {proposal_id!r}")
        return proposal

    async def decide(
        self,
        proposal_id: str,
        decision: str,
        correction: str | None = None,
        edited_arguments: dict[str, Any] | None = None,
    ) -> DecideResult:
        """Record a decision and act on it."""
        proposal = await self.lookup(proposal_id)
        agent = await self.ready_agent()
        with contextlib.suppress(JsonRpcException):
            await self.flush_manual_edits()
        # One decision at a time per connection: a double-clicked Approve must find the
        # proposal decided, not race the first click into two writes.
        async with self._decide_lock:
            with self.holding():
                if decision == "approve":
                    outcome = await self._approve(agent, proposal)
                else:
                    uri = self.proposal_uri(proposal)
                    before = self.buffer_text(uri) if uri else None
                    outcome = await self.call(
                        agent.decide, proposal.id, decision, correction, edited_arguments
                    )
                    self.forget(proposal.id)
                    if decision == "edit" and uri is not None:
                        await self._sync_buffer(proposal, uri, before)
                if outcome.next_proposal is not None:
                    self.announce(outcome.next_proposal)
        following = outcome.next_proposal
        return DecideResult(
            ok=outcome.ok,
            learned=outcome.learned,
            next_proposal_id=following.id if following else None,
            next_proposal=self.notification(following) if following else None,
        )

    async def _check_decidable(self, agent: Agent, proposal: Proposal) -> None:
        """Refuse before touching the buffer what the agent would refuse after."""
        row = await self.call(agent.store.proposal, proposal.id)
        if row is None:
            raise RequestFailed(f"unknown proposal {proposal.id!r}")
        if row["status"] != "pending":
            self.forget(proposal.id)
            raise RequestFailed(f"proposal {proposal.id!r} was already {row['status']}")
        preview = proposal.preview
        if preview is not None and self.workspace is not None:
            on_disk = await self.loop.run_in_executor(
                self._executor, _sha256, self.workspace / preview.path
            )
            if on_disk != preview.old_sha256:
                await self.call(agent.invalidate_path, preview.path)
                self.forget(proposal.id)
                what = "was deleted" if on_disk is None else "changed on disk"
                raise RequestFailed(
                    f"{preview.path} {what} since proposal {proposal.id} was made; "
                    "it was not applied and is now stale"
                )

    async def _approve(self, agent: Agent, proposal: Proposal) -> Any:
        """One path for every client: the server changes an open buffer itself with a
        versioned workspace/applyEdit (the client refuses it if its buffer moved on, e.g.
        a didChange still on its way), then the agent writes the file. A file not open in
        the client is written by the agent alone. Nothing depends on when the client
        sends its changes."""
        preview = proposal.preview
        uri = self.proposal_uri(proposal)
        buffer = self.buffer_text(uri) if uri else None
        we_applied = False
        if preview is not None and uri is not None and buffer is not None:
            old = preview.old_content or ""
            # Before the buffer is touched: an already decided or stale proposal is
            # refused here.
            await self._check_decidable(agent, proposal)
            if buffer == old:
                await self.apply(uri, old, preview.new_content, f"Approve {proposal.id}")
                we_applied = True
            elif buffer != preview.new_content:  # else the reviewer typed it in already
                raise RequestFailed(
                    f"{preview.path} has unsaved changes in the editor since proposal "
                    f"{proposal.id} was made; save or undo them first, or deny the proposal"
                )
        try:
            outcome = await self.call(agent.decide, proposal.id, "approve")
        except Exception:
            if we_applied and preview is not None and uri is not None:
                # Both or neither: the decision was not recorded, so the buffer goes back.
                # Unversioned: the client's didChange for our edit may not have come yet.
                with contextlib.suppress(Exception):
                    await self.apply(
                        uri,
                        preview.new_content,
                        preview.old_content or "",
                        "Undo approve",
                        versioned=False,
                    )
            self.forget(proposal.id)
            raise
        self.forget(proposal.id)
        if preview is not None and uri is not None:
            self.track_applied(uri, proposal.id, preview.old_content or "", preview.new_content)
        return outcome

    async def _sync_buffer(self, proposal: Proposal, uri: str, before: str | None) -> None:
        """After the agent wrote an edited call to disk, bring an open, untouched buffer
        along so the reviewer sees (and can undo) what was written."""
        assert self.workspace is not None
        path = self.workspace / (proposal.preview.path if proposal.preview else "")
        try:
            after = await self.loop.run_in_executor(self._executor, path.read_text)
        except OSError:
            return
        old = proposal.preview.old_content if proposal.preview else None
        if before is not None and before == (old or "") and before != after:
            with contextlib.suppress(RequestFailed):
                await self.apply(uri, before, after, f"Edit {proposal.id}")
        self.track_applied(uri, proposal.id, old or "", after)

    # -- manual edits after a decision -----------------------------------------------------

    def track_applied(self, uri: str, proposal_id: str, before: str, after: str) -> None:
        change = line_edit(before, after)
        old = self.applied.pop(uri, None)
        if old and old.timer:
            old.timer.cancel()
        self.applied[uri] = AppliedRegion(
            proposal_id, after, change.start, max(change.new_end, change.start + 1)
        )

    def on_change(self, uri: str, changes: list[Any]) -> None:
        region = self.applied.get(uri)
        if region is None:
            return
        if time.monotonic() - region.at > self.settings.manual_edit_window_s:
            self.applied.pop(uri, None)
            return
        current = self.buffer_text(uri)
        if current is None or current == region.content:
            return  # our own applyEdit, or an undo back to what was applied
        touched = False
        for change in changes:
            rng = getattr(change, "range", None)
            if rng is None or (rng.start.line < region.end and region.start <= rng.end.line):
                touched = True
        if not touched:
            return
        if region.timer:
            region.timer.cancel()
        # Debounced: one signal per burst of typing, carrying the whole difference.
        region.timer = self.loop.call_later(1.0, lambda: self.spawn(self._record_manual(uri)))

    async def flush_manual_edits(self) -> None:
        """Record pending manual-edit signals now (before the next decision, at shutdown),
        so the event log has them in the order the reviewer acted."""
        for uri, region in list(self.applied.items()):
            if region.timer is not None:
                region.timer.cancel()
                region.timer = None
                await self._record_manual(uri)

    async def _record_manual(self, uri: str) -> None:
        region = self.applied.get(uri)
        current = self.buffer_text(uri)
        if region is None or current is None or current == region.content:
            return
        name = Path(to_fs_path(uri) or uri).name
        diff = unified_diff(region.content, current, name, "applied", "reviewer")
        if diff == region.recorded:
            return
        region.recorded = diff
        agent = await self.agent()
        await self.call(agent.record_manual_edit, region.proposal_id, diff, current)

    # -- files opened for the reviewer -----------------------------------------------------

    def _file(self, kind: str, proposal: Proposal, name: str, content: str) -> Path:
        folder = state_dir(self.settings) / kind / proposal.id
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_text(content, encoding="utf-8")
        return path

    async def open_file(self, kind: str, proposal: Proposal, name: str, content: str) -> str:
        path = await self.loop.run_in_executor(
            self._executor, self._file, kind, proposal, name, content
        )
        uri = normalize_uri(path.as_uri())
        self.files[uri] = OpenedFile(kind, proposal.id, path)
        await self.show_document(uri, path)
        return uri

    async def show_document(self, uri: str, path: Path, rng: lsp.Range | None = None) -> None:
        try:
            result = await self.ls.window_show_document_async(
                lsp.ShowDocumentParams(uri=uri, take_focus=True, selection=rng)
            )
            if result.success:
                return
        except Exception as exc:
            log.info("window/showDocument failed: %s", exc)
        # A client that cannot open documents still gets the path.
        self.ls.window_show_message(
            lsp.ShowMessageParams(type=lsp.MessageType.Info, message=f"Open {path}")
        )

    async def open_correction(self, proposal: Proposal) -> str:
        message = proposal_message(proposal.call.tool, proposal.call.arguments)
        header = CORRECTION_HEADER.format(pid=proposal.id, message=message)
        return await self.open_file("corrections", proposal, f"{proposal.id}.md", header)

    async def open_edit(self, proposal: Proposal) -> str:
        if proposal.preview is not None:
            name, content = Path(proposal.preview.path).name, proposal.preview.new_content
        elif proposal.call.tool == "bash":
            name, content = "command.sh", str(proposal.call.arguments.get("cmd", "")) + "\n"
        else:
            import json

            name, content = "arguments.json", json.dumps(proposal.call.arguments, indent=2) + "\n"
        return await self.open_file("edits", proposal, name, content)

    async def open_diff(self, proposal: Proposal) -> str:
        if proposal.preview is None:
            raise RequestFailed(f"proposal {proposal.id} ({proposal.call.tool}) changes no file")
        return await self.open_file("diffs", proposal, f"{proposal.id}.diff", proposal.preview.diff)

    async def on_save(self, uri: str, text: str | None) -> bool:
        """A saved correction or edit file is the decision. True when it was one of ours."""
        opened = self.files.get(uri)
        if opened is None or opened.kind == "diffs":
            return False
        if text is None:
            text = await self.loop.run_in_executor(self._executor, opened.path.read_text)
        try:
            proposal = await self.lookup(opened.proposal_id)
            if opened.kind == "corrections":
                correction = strip_correction(text)
                if not correction:
                    self.show_message("The correction is empty: nothing was sent.", warn=True)
                    return True
                await self.decide(proposal.id, "deny", correction=correction)
            else:
                edited = self._edited_arguments(proposal, text)
                await self.decide(proposal.id, "edit", edited_arguments=edited)
        except (JsonRpcException, EditError) as exc:
            self.show_message(
                f"Proposal {opened.proposal_id}: {getattr(exc, 'message', exc)}", warn=True
            )
            return True
        self.files.pop(uri, None)
        return True

    def _edited_arguments(self, proposal: Proposal, text: str) -> dict[str, Any]:
        call = proposal.call
        if call.tool in FILE_TOOLS and proposal.preview is not None:
            return edited_file_arguments(
                call.tool, call.arguments, proposal.preview.old_content, text
            )
        if call.tool == "bash":
            return edited_command_arguments(call.arguments, text)
        return edited_json_arguments(call.arguments, text)

    # -- plain clients ---------------------------------------------------------------------

    async def _reveal(self, uri: str, note: ProposalNotification) -> None:
        caps = self.ls.client_capabilities.window
        if not (caps and caps.show_document and caps.show_document.support):
            return
        rng = None
        if note.range is not None:
            pos = lsp.Position(line=note.range.start.line, character=0)
            rng = lsp.Range(start=pos, end=pos)
        await self.show_document(uri, Path(to_fs_path(uri) or uri), rng)

    async def _ask(self, proposal: Proposal) -> None:
        """Offer a non-file call to a client that knows nothing of continual/proposal."""
        message = proposal_message(proposal.call.tool, proposal.call.arguments, proposal.note)
        actions = ["Approve", "Deny…", "Edit…"]
        try:
            choice = await self.ls.window_show_message_request_async(
                lsp.ShowMessageRequestParams(
                    type=lsp.MessageType.Info,
                    message=message,
                    actions=[lsp.MessageActionItem(title=a) for a in actions],
                )
            )
        except Exception as exc:
            log.info("window/showMessageRequest failed: %s", exc)
            return
        title = getattr(choice, "title", None)
        if title is None and isinstance(choice, dict):
            title = choice.get("title")
        try:
            if title == "Approve":
                await self.decide(proposal.id, "approve")
            elif title == "Deny…":
                await self.open_correction(proposal)
            elif title == "Edit…":
                await self.open_edit(proposal)
        except JsonRpcException as exc:
            self.show_message(f"Proposal {proposal.id}: {exc.message}", warn=True)

    # -- disk changes ----------------------------------------------------------------------

    async def _watch(self) -> None:
        from watchfiles import DefaultFilter, awatch

        assert self.workspace is not None
        root = self.workspace
        try:
            async for changes in awatch(
                root,
                stop_event=self._stop,
                watch_filter=DefaultFilter(),
                debounce=300,
                step=50,
                recursive=True,
                ignore_permission_denied=True,
            ):
                rels = set()
                for _, raw in changes:
                    with contextlib.suppress(ValueError):
                        rels.add(Path(raw).resolve().relative_to(root).as_posix())
                await self.on_disk_change(rels)
        except (FileNotFoundError, RuntimeError) as exc:
            self.log_error(f"not watching {root} for changes: {exc}")

    async def on_disk_change(self, rel_paths: set[str]) -> None:
        """A file changed outside the editor: a proposal computed on the old content must
        never be applied over the new one."""
        touched = {
            p.preview.path
            for p in self.proposals.values()
            if p.preview is not None and p.preview.path in rel_paths
        }
        if not touched:
            return
        agent = await self.agent()
        for rel in sorted(touched):
            try:
                stale = await self.call(agent.invalidate_path, rel)
            except JsonRpcException as exc:
                self.log_error(f"checking {rel} after a change on disk failed: {exc.message}")
                continue
            for pid in stale:
                self.forget(pid)
                self.show_message(
                    f"Proposal {pid} is stale: {rel} changed on disk, so it will not be applied.",
                    warn=True,
                )

    # -- progress and messages -------------------------------------------------------------

    async def _report_progress(
        self, token: str, title: str, message: str, percentage: int | None, done: bool
    ) -> None:
        progress = self.ls.work_done_progress
        caps = self.ls.client_capabilities.window
        if not (caps and caps.work_done_progress):
            return
        if token not in self._progress:
            try:
                # Bounded: a client that never answers must not stall every later event.
                await asyncio.wait_for(progress.create_async(token), PROGRESS_CREATE_S)
            except Exception as exc:
                log.info("window/workDoneProgress/create failed: %s", exc)
                progress.tokens.pop(token, None)
                return
            self._progress[token] = True
            progress.begin(
                token,
                lsp.WorkDoneProgressBegin(
                    title=title, message=message or None, percentage=percentage, cancellable=False
                ),
            )
            if not done:
                return
        if done:
            progress.end(token, lsp.WorkDoneProgressEnd(message=message or None))
            self._progress.pop(token, None)
            progress.tokens.pop(token, None)  # the agent may reuse the token later
        else:
            progress.report(
                token, lsp.WorkDoneProgressReport(message=message or None, percentage=percentage)
            )

    def show_message(self, message: str, warn: bool = False) -> None:
        kind = lsp.MessageType.Warning if warn else lsp.MessageType.Info
        self.ls.window_show_message(lsp.ShowMessageParams(type=kind, message=message))

    def log_error(self, message: str) -> None:
        log.error("%s", message)
        with contextlib.suppress(Exception):
            self.ls.window_log_message(
                lsp.LogMessageParams(type=lsp.MessageType.Error, message=message)
            )
