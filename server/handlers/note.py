"""continual/note {text} → {ok}: context for the session (and the correction detector)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from continual_lsp.protocol import METHOD_NOTE, NoteParams, OkResult

from ..errors import validate

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

    from ..connection import Connection


async def note(ls: Connection, params: Any) -> dict[str, Any]:
    args = validate(NoteParams, METHOD_NOTE, params)
    agent = await ls.session.agent()
    await ls.session.call(agent.note, args.text)
    return OkResult(ok=True).dump()


def register(ls: LanguageServer) -> None:
    ls.feature(METHOD_NOTE)(note)
