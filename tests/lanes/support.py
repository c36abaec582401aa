"""A WEIGHTS cluster taught by repeated denials, for the weights lane and consolidation tests."""

from __future__ import annotations

from typing import Any

from continual_lsp.config import Settings
from continual_lsp.lanes.allocator import route_correction

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
        ctx = {
            "task_text": tasks[i % len(tasks)],
            "tool": "write",
            "arguments": {"path": "src/calc/ops.py", "content": f"v{i}"},
            "demonstration": {
                "tool": "edit_lines",
                "arguments": {"path": "src/calc/ops.py", "start": 1, "end": 1, "content": f"v{i}"},
            },
        }
        text = (
            PRINCIPLE
            if i % 2 == 0
            else "Use edit_lines instead of rewriting the whole file with write."
        )
        item = route_correction(store, text, ctx, settings, denial=True, embedder=embedder)
    assert item is not None
    return item.cluster_id
