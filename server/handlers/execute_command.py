"""workspace/executeCommand for the four proposal commands.

    continual.approve  [proposalId]   an open buffer is changed by the server's own
                       versioned workspace/applyEdit, then the file is written
    continual.deny     [proposalId, correction?]   no correction: open a correction file
    continual.edit     [proposalId, editedArguments?]   none: open the proposal as a file
    continual.showDiff [proposalId]
    continual.override [proposalId]   run a call a guard blocks (as approve does)

Results are plain objects: the decide result for decisions, `{ok, uri}` when a file was
opened for the reviewer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from .. import decisions, reviewer_files

# `Connection` at run time, not under TYPE_CHECKING: pygls resolves command handlers'
# type hints (typing.get_type_hints) to find their parameters.
from ..connection import Connection
from ..proposals import lookup
from .code_action import APPROVE, DENY, DIFF, EDIT, OVERRIDE

if TYPE_CHECKING:
    from continual_lsp.agent.proposal import Proposal

    from ..session import Session

OpenFile = Callable[["Session", "Proposal"], Awaitable[str]]


def _args(command: str, args: tuple[Any, ...], usage: str, max_args: int) -> tuple[str, Any]:
    if not args or not isinstance(args[0], str) or not args[0] or len(args) > max_args:
        raise JsonRpcInvalidParams(message=f"{command} expects {usage}, got {list(args)!r}")
    return args[0], args[1] if len(args) > 1 else None


async def _decided(ls: Connection, pid: str, decision: str, **kwargs: Any) -> dict[str, Any]:
    return (await decisions.decide(ls.session, pid, decision, **kwargs)).dump()


async def _opened(ls: Connection, pid: str, open_file: OpenFile) -> dict[str, Any]:
    """Open a file for the reviewer; its uri is the answer."""
    proposal = await lookup(ls.session, pid)
    return {"ok": True, "uri": await open_file(ls.session, proposal)}


def register(ls: LanguageServer) -> None:
    @ls.command(APPROVE)
    async def approve(ls: Connection, *args: Any) -> dict[str, Any]:
        pid, _ = _args(APPROVE, args, "[proposalId]", 1)
        return await _decided(ls, pid, "approve")

    @ls.command(OVERRIDE)
    async def override(ls: Connection, *args: Any) -> dict[str, Any]:
        pid, _ = _args(OVERRIDE, args, "[proposalId]", 1)
        return await _decided(ls, pid, "override")

    @ls.command(DENY)
    async def deny(ls: Connection, *args: Any) -> dict[str, Any]:
        pid, correction = _args(DENY, args, "[proposalId, correction?]", 2)
        if correction is not None and not isinstance(correction, str):
            raise JsonRpcInvalidParams(message=f"{DENY}: the correction must be a string")
        if correction and correction.strip():
            return await _decided(ls, pid, "deny", correction=correction)
        return await _opened(ls, pid, reviewer_files.open_correction)

    @ls.command(EDIT)
    async def edit(ls: Connection, *args: Any) -> dict[str, Any]:
        pid, edited = _args(EDIT, args, "[proposalId, editedArguments?]", 2)
        if edited is None:
            return await _opened(ls, pid, reviewer_files.open_edit)
        if not isinstance(edited, dict):
            raise JsonRpcInvalidParams(message=f"{EDIT}: editedArguments must be an object")
        return await _decided(ls, pid, "edit", edited_arguments=edited)

    @ls.command(DIFF)
    async def show_diff(ls: Connection, *args: Any) -> dict[str, Any]:
        pid, _ = _args(DIFF, args, "[proposalId]", 1)
        return await _opened(ls, pid, reviewer_files.open_diff)
