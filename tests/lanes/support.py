"""Helpers of the lanes tests: calls and guards compiled from rule text (the guard-kind and
shape tests), and a WEIGHTS cluster taught by repeated denials (the weights lane and
consolidation tests)."""

from __future__ import annotations

from typing import Any

from continual_lsp.config import Settings
from continual_lsp.lanes.compile import compile_guard
from continual_lsp.lanes.guards.guard_set import Guard
from continual_lsp.lanes.reading import Situation, read
from continual_lsp.lanes.routing.allocator import route_correction
from continual_lsp.tools.base import ToolCall

PRINCIPLE = "Prefer edit_lines over rewriting a whole file with write."


def teach_cluster(store: Any, embedder: Any, n: int = 4) -> str:
    """Route `n` denials of a whole-file write (two phrasings, one principle); the cluster id."""
    settings = Settings(consolidation_depth=4)
    item = None
    tasks = [
        "Fix the typo in ops.py",
        "Rename x to y in ops.py",
        "Add a docstring to ops.py",
        "Fix the import in ops.py",
    ]
    for i in range(n):
        situation = Situation(
            task_text=tasks[i % len(tasks)],
            tool="write",
            arguments={"path": "src/calc/ops.py", "content": f"v{i}"},
            demonstration=ToolCall(
                tool="edit_lines",
                arguments={"path": "src/calc/ops.py", "start": 1, "end": 1, "content": f"v{i}"},
            ),
        )
        text = (
            PRINCIPLE
            if i % 2 == 0
            else "Use edit_lines instead of rewriting the whole file with write."
        )
        item = route_correction(store, text, situation, settings, denial=True, embedder=embedder)
    assert item is not None
    return item.cluster_id


def bash(cmd: str) -> ToolCall:
    return ToolCall(tool="bash", arguments={"cmd": cmd})


def write(path: str, content: str = "x\n") -> ToolCall:
    return ToolCall(tool="write", arguments={"path": path, "content": content})


def guard_from(text: str) -> Guard:
    spec = compile_guard(read(text))
    assert spec is not None, text
    return Guard("g", spec)


def blocks_then_allows(text: str, bad: tuple[str, str], good: tuple[str, str]) -> None:
    """The guard compiled from `text` blocks writing `bad` (path, content) and allows `good`."""
    guard = guard_from(text)
    assert guard.check(write(*bad), None).action == "block", text
    assert guard.check(write(*good), None).action == "allow", text
