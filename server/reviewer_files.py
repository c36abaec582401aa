"""Files the server writes and opens for the reviewer: a correction to write (saving it
denies), the proposal as a file to edit (saving it decides `edit`), a diff to read.

They live in a per-user folder beside the user's store, so a reviewer may reopen and
save one later, from any connection.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

from continual_lsp.config import Settings

from . import decisions, proposals
from .documents import normalize_uri
from .edits import EditError, edited_command_arguments, edited_file_arguments, edited_json_arguments
from .errors import RequestFailed
from .lsp_text import proposal_message
from .proposals import FILE_TOOLS
from .state import OpenedFile

if TYPE_CHECKING:
    from continual_lsp.agent.proposal import Proposal

    from .session import Session

log = logging.getLogger(__name__)

CORRECTION_HEADER = (
    "<!-- continual: write your correction for proposal {pid} below, then save this file.\n"
    "     {message}\n"
    "     Text inside this comment is ignored; saving with no text sends nothing. -->\n\n"
)


def state_dir(settings: Settings) -> Path:
    """Per-user folder beside the user's store for correction, edit and diff files."""
    store = settings.store_file()
    return store.parent / f"{store.stem}.d"


def strip_correction(text: str) -> str:
    """The reviewer's words: the file minus the instruction comment."""
    start = text.find("<!--")
    end = text.find("-->", start)
    if start != -1 and end != -1:
        text = text[:start] + text[end + 3 :]
    return text.strip()


def _write(settings: Settings, kind: str, proposal_id: str, name: str, content: str) -> Path:
    folder = state_dir(settings) / kind / proposal_id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(content, encoding="utf-8")
    return path


async def _open(
    session: Session,
    kind: Literal["corrections", "edits", "diffs"],
    proposal: Proposal,
    name: str,
    content: str,
) -> str:
    path = await session.blocking(_write, session.settings, kind, proposal.id, name, content)
    uri = normalize_uri(path.as_uri())
    session.state.files[uri] = OpenedFile(kind, proposal.id, path)
    await show_document(session, uri, path)
    return uri


async def show_document(
    session: Session, uri: str, path: Path, rng: lsp.Range | None = None
) -> None:
    try:
        result = await session.ls.window_show_document_async(
            lsp.ShowDocumentParams(uri=uri, take_focus=True, selection=rng)
        )
        if result.success:
            return
    except Exception as exc:
        log.info("window/showDocument failed: %s", exc)
    # A client that cannot open documents still gets the path.
    session.ls.window_show_message(
        lsp.ShowMessageParams(type=lsp.MessageType.Info, message=f"Open {path}")
    )


async def open_correction(session: Session, proposal: Proposal) -> str:
    message = proposal_message(proposal.call.tool, proposal.call.arguments)
    header = CORRECTION_HEADER.format(pid=proposal.id, message=message)
    return await _open(session, "corrections", proposal, f"{proposal.id}.md", header)


async def open_edit(session: Session, proposal: Proposal) -> str:
    if proposal.preview is not None:
        name, content = Path(proposal.preview.path).name, proposal.preview.new_content
    elif proposal.call.tool == "bash":
        name, content = "command.sh", str(proposal.call.arguments.get("cmd", "")) + "\n"
    else:
        name, content = "arguments.json", json.dumps(proposal.call.arguments, indent=2) + "\n"
    return await _open(session, "edits", proposal, name, content)


async def open_diff(session: Session, proposal: Proposal) -> str:
    if proposal.preview is None:
        raise RequestFailed(f"proposal {proposal.id} ({proposal.call.tool}) changes no file")
    return await _open(session, "diffs", proposal, f"{proposal.id}.diff", proposal.preview.diff)


async def on_save(session: Session, uri: str, text: str | None) -> bool:
    """A saved correction or edit file is the decision. True when it was one of ours."""
    opened = session.state.files.get(uri)
    if opened is None or opened.kind == "diffs":
        return False
    if text is None:
        text = await session.blocking(opened.path.read_text)
    try:
        proposal = await proposals.lookup(session, opened.proposal_id)
        if opened.kind == "corrections":
            correction = strip_correction(text)
            if not correction:
                session.show_message("The correction is empty: nothing was sent.", warn=True)
                return True
            await decisions.decide(session, proposal.id, "deny", correction=correction)
        else:
            edited = edited_arguments(proposal, text)
            await decisions.decide(session, proposal.id, "edit", edited_arguments=edited)
    except (JsonRpcException, EditError) as exc:
        session.show_message(
            f"Proposal {opened.proposal_id}: {getattr(exc, 'message', exc)}", warn=True
        )
        return True
    session.state.files.pop(uri, None)
    return True


def edited_arguments(proposal: Proposal, text: str) -> dict[str, Any]:
    """The call's arguments from the reviewer's saved edit file."""
    call = proposal.call
    if call.tool in FILE_TOOLS and proposal.preview is not None:
        return edited_file_arguments(call.tool, call.arguments, proposal.preview.old_content, text)
    if call.tool == "bash":
        return edited_command_arguments(call.arguments, text)
    return edited_json_arguments(call.arguments, text)
