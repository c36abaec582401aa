"""Optional xAI structured-output calls for the detector, the allocator and the guard writer.

Off unless the setting says `allocator = "xai"` (TOML, `CONTINUAL_LSP_ALLOCATOR=xai`, or
`--allocator xai`); an `XAI_API_KEY` in the environment alone never turns it on. With it
on, the key must be set and `xai_sdk` importable. Any error (no network, bad key,
timeout, schema mismatch) returns None and the caller takes the offline path, so the
lanes never depend on a remote service.

Privacy: when on, the text of each correction or rule the detector and allocator see is
sent to xAI (and, for the guard writer, the rule's text again); nothing else is — no file
contents, no diffs, no tool results.

Every prompt and the structured-output schema each is answered with live here, once.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import logging
import os
from typing import Literal

from pydantic import BaseModel

from continual_lsp.config import Settings

log = logging.getLogger(__name__)


class DetectionAnswer(BaseModel):
    is_correction: bool
    confidence: float


class Allocation(BaseModel):
    checkable: bool
    behavioural: bool
    confidence: float


class GeneratedGuard(BaseModel):
    feasible: bool
    code: str = ""


Task = Literal["detect", "allocate", "guard"]

SCHEMAS: dict[Task, type[BaseModel]] = {
    "detect": DetectionAnswer,
    "allocate": Allocation,
    "guard": GeneratedGuard,
}

PROMPTS: dict[Task, str] = {
    "detect": (
        "You classify one message sent to a coding agent. is_correction=true when it is a "
        "standing rule, preference, correction of the agent's behaviour, or a fact about the "
        "project the agent should remember; false when it is an ordinary one-off request or "
        "question about a specific task. Answer with confidence in [0,1]."
    ),
    "allocate": (
        "A reviewer gave a coding agent this rule or correction. checkable=true when a "
        "deterministic function over the agent's proposed tool call (tool name, shell "
        "command, file path, written content, sizes) could guarantee it. behavioural=true "
        "when it is a judgement about how to work, write or communicate (rather than a fact "
        "about the project). Give a confidence in [0,1]."
    ),
    "guard": (
        "Write a Python guard for a coding agent's tool calls. Define exactly one function "
        "`def check(call, preview):` where call = {'tool': str, 'arguments': dict} (tools: "
        "read, write, edit, edit_lines, glob, grep, bash; bash has arguments.cmd; file tools "
        "have arguments.path and content/new) and preview is None or {'path', "
        "'old_content', 'new_content', 'diff'}. Return None to allow, or {'action': "
        "'block', 'message': str}, or {'action': 'rewrite', 'message': str, 'arguments': "
        "{...}}. Standard library only (re is fine); no I/O, no network, no subprocesses. If "
        "the rule cannot be checked on a single call, set feasible=false."
    ),
}


def enabled(settings: Settings | None) -> bool:
    """The setting asks for xAI, a key is there and the SDK imports."""
    return (
        settings is not None
        and settings.allocator == "xai"
        and bool(os.environ.get("XAI_API_KEY"))
        and importlib.util.find_spec("xai_sdk") is not None
    )


def _loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0].strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def ask(task: Task, user_text: str, settings: Settings | None) -> BaseModel | None:
    """One structured completion for `task`, or None (off, or any failure: logged)."""
    if not enabled(settings):
        return None
    assert settings is not None
    try:
        from xai_sdk import Client
        from xai_sdk.chat import system, user

        client = Client(
            api_key=os.environ["XAI_API_KEY"],
            api_host=settings.xai_host,
            timeout=settings.xai_timeout_s,
            # Plain gRPC only to this machine (a local fake or proxy); anything else is TLS.
            use_insecure_channel=_loopback(settings.xai_host),
        )
        chat = client.chat.create(model=settings.xai_model)
        chat.append(system(PROMPTS[task]))
        chat.append(user(user_text))
        _response, parsed = chat.parse(SCHEMAS[task])
        return parsed
    except Exception as exc:  # the offline path is always there: never let this escape
        log.warning("xAI call failed, using the offline path: %s", exc)
        return None
