"""What a handler is handed as `ls`.

pygls passes its server object to every handler; a handler needs only the connection's
session from it. Typing handlers with this protocol, not the server class, keeps them
free of `app.py` (which imports them to register them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .session import Session


class Connection(Protocol):
    session: Session
