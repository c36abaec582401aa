"""continual/note {text} → {ok}: context for the session (and the correction detector)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from continual_lsp.protocol import METHOD_NOTE, NoteParams

from .agent_request import register_agent_request

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer


def register(ls: LanguageServer) -> None:
    register_agent_request(ls, METHOD_NOTE, NoteParams, lambda agent, args: agent.note(args.text))
