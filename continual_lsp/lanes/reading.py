"""A correction read once, and the situation it was made in.

`route_correction` makes one `Reading` per correction and hands it to the task-scope
reader, the detector, the guard compiler, the allocator and the cue maker, so markup is
stripped once (`plain`: what their cue lists and phrase patterns search) and the
handcrafted features are computed once (`features`), however many of them look.

A correction made on a proposal comes with its `Situation` (the corrected call, the task
it served); a note or an imported rule has none. Part of it is stored: a task-scoped
item keeps `Situation.task_record()` in its spec and promotion reads it back with
`Situation.model_validate`, so those keys and their omissions are a stored format.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from continual_lsp.lanes.features import handcrafted, strip_markup
from continual_lsp.tools.base import ToolCall


@dataclass(frozen=True)
class Reading:
    text: str  # as written: headings, backticks and emphasis kept
    plain: str  # `strip_markup(text)`: emphasis dropped, backticks kept

    @cached_property
    def features(self) -> np.ndarray:
        """The handcrafted features (`features.FEATURE_NAMES`), made on first use."""
        return handcrafted(self.text, self.plain)


def read(text: str) -> Reading:
    return Reading(text, strip_markup(text))


class Situation(BaseModel):
    """Where a correction was made: the corrected call and the task it served.

    Every field may be missing: a promoted item's stored record keeps only some of them,
    and a denial is routed before its retry (the demonstration) is known.
    """

    model_config = ConfigDict(frozen=True)

    proposal_id: str | None = None
    task_text: str | None = None
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    # The file the call changes (its preview's path, else its `path` argument).
    path: str | None = None
    # The call the reviewer put in its place (an edit's), when there is one.
    demonstration: ToolCall | None = None

    @property
    def command(self) -> str | None:
        """The corrected call's command line, when it was a bash call with one."""
        cmd = (self.arguments or {}).get("cmd") if self.tool == "bash" else None
        return cmd if isinstance(cmd, str) else None

    def task_record(self) -> dict[str, Any]:
        """What a task-scoped item keeps: the tool, path and task text when given, and of
        the arguments only a bash command (a write's content is not kept)."""
        kept: dict[str, Any] = {
            key: value
            for key, value in (
                ("tool", self.tool),
                ("path", self.path),
                ("task_text", self.task_text),
            )
            if value
        }
        if self.command is not None:
            kept["arguments"] = {"cmd": self.command}
        return kept
