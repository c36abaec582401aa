"""Optional xAI structured-output calls for the detector and the allocator.

Used only when `XAI_API_KEY` is set and `xai_sdk` imports; any error (no network, bad
key, timeout, schema mismatch) returns None and the caller falls back to the offline
path, so the lanes never depend on a remote service.

Privacy: this sends the correction's text to xAI. It is opt-in by the key alone because
that is the documented switch; set CONTINUAL_LSP_XAI_DISABLE=1 to keep a key in the
environment for other tools without the lanes using it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import TypeVar

from pydantic import BaseModel

log = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)

DEFAULT_MODEL = "grok-4-fast-non-reasoning"


def available() -> bool:
    return (
        bool(os.environ.get("XAI_API_KEY"))
        and not os.environ.get("CONTINUAL_LSP_XAI_DISABLE")
        and importlib.util.find_spec("xai_sdk") is not None
    )


def parse(
    system_prompt: str, user_text: str, shape: type[T], timeout_s: float | None = None
) -> T | None:
    """One structured completion, or None on any failure (logged)."""
    if not available():
        return None
    try:
        from xai_sdk import Client
        from xai_sdk.chat import system, user

        host = os.environ.get("CONTINUAL_LSP_XAI_HOST", "api.x.ai")
        if timeout_s is None:
            timeout_s = float(os.environ.get("CONTINUAL_LSP_XAI_TIMEOUT", "20"))
        client = Client(api_key=os.environ["XAI_API_KEY"], api_host=host, timeout=timeout_s)
        chat = client.chat.create(model=os.environ.get("CONTINUAL_LSP_XAI_MODEL", DEFAULT_MODEL))
        chat.append(system(system_prompt))
        chat.append(user(user_text))
        _response, parsed = chat.parse(shape)
        return parsed
    except Exception as exc:  # the offline path is always there: never let this escape
        log.warning("xAI call failed, using the offline path: %s", exc)
        return None
