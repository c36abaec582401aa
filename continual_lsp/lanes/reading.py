"""A correction read once: the text as written, its plain form and its features.

`route_correction` makes one `Reading` per correction and hands it to the task-scope
reader, the detector, the guard compiler, the allocator and the cue maker, so markup is
stripped once (`plain`: what their cue lists and phrase patterns search) and the
handcrafted features are computed once (`features`), however many of them look.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from continual_lsp.lanes.features import handcrafted, strip_markup


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
