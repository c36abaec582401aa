"""The CODE lane's guards: a correction kept as a check run on every proposal.

`spec` says what a guard checks, `evaluate` judges one rule on one call (and on the task's
history), `guard_set` runs every active guard of a store (`check_guards`, the agent's
entry point), `guard_code` runs generated guard code in the sandbox, `feedback` reads
what the reviewer's accepted calls say of a guard. `commands` is the one shell-word
parser (the allow rules read it too) and `patterns` runs every guard pattern on RE2.

A `block` verdict is turned into an automatic denial by the agent, with `message` as the
correction; a `rewrite` verdict carries the rewritten call and a note for the reviewer.
`GuardVerdict` lives here, at the package's door, as what every caller reads back.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from continual_lsp.tools.base import ToolCall


class GuardVerdict(BaseModel):
    action: Literal["allow", "block", "rewrite"]
    message: str = ""
    rewritten_call: ToolCall | None = None
    guard_id: str | None = None


ALLOW = GuardVerdict(action="allow")
