"""One module per LSP method (or family of commands); `register_all` wires them up."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import (
    allow,
    code_action,
    decide,
    did_change,
    did_close,
    did_open,
    did_save,
    execute_command,
    hunk,
    initialize,
    ledger,
    note,
    pending,
    promote,
    revert,
    shutdown,
    start_task,
    status,
    undo,
)

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer


MODULES = (
    initialize,
    did_open,
    did_change,
    did_save,
    did_close,
    code_action,
    execute_command,
    start_task,
    decide,
    note,
    ledger,
    revert,
    promote,
    status,
    pending,
    undo,
    allow,
    hunk,
    shutdown,
)


def register_all(ls: LanguageServer) -> None:
    for module in MODULES:
        module.register(ls)
