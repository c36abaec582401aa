"""A change whose only fault is its indentation, shifted to fit (`agent.reindent`)."""

from __future__ import annotations

import ast

from continual_lsp.agent.reindent import is_indentation, variants
from continual_lsp.tools.base import ToolCall

SYNC = (
    "import logging\n\nlogger = logging.getLogger(__name__)\n\n\n"
    "def sync_all(accounts):\n    for account in accounts:\n        account.sync()\n"
)


def _applied_lines(text: str, call: ToolCall) -> str:
    lines = text.splitlines(keepends=True)
    a = call.arguments
    return "".join(lines[: a["start"] - 1]) + a["content"] + "".join(lines[a["end"] :])


def test_a_line_inserted_at_the_wrong_depth_gets_the_depth_of_the_line_it_goes_before() -> None:
    call = ToolCall(
        tool="edit_lines",
        arguments={"path": "sync.py", "start": 8, "end": 7, "content": 'logger.info("one")\n'},
    )
    found = variants(call, SYNC)
    assert found[0].arguments["content"] == '        logger.info("one")\n'
    ast.parse(_applied_lines(SYNC, found[0]))


def test_a_block_keeps_its_own_shape_and_may_go_one_level_under_an_opener() -> None:
    call = ToolCall(
        tool="edit_lines",
        arguments={
            "path": "sync.py",
            "start": 8,
            "end": 8,
            "content": "  if account:\n      account.sync()\n",
        },
    )
    (first, *rest) = variants(call, SYNC)
    assert first.arguments["content"] == "        if account:\n            account.sync()\n"
    ast.parse(_applied_lines(SYNC, first))
    assert all(v.arguments["content"] != call.arguments["content"] for v in rest)


def test_an_edit_shifts_the_lines_after_its_first() -> None:
    call = ToolCall(
        tool="edit",
        arguments={
            "path": "sync.py",
            "old": "account.sync()",
            "new": 'account.sync()\nlogger.info("synced %s", account.id)',
        },
    )
    (only,) = variants(call, SYNC)
    assert only.arguments["new"] == 'account.sync()\n        logger.info("synced %s", account.id)'
    ast.parse(SYNC.replace(call.arguments["old"], only.arguments["new"]))


def test_nothing_to_shift() -> None:
    write = ToolCall(tool="write", arguments={"path": "a.py", "content": "x = 1\n"})
    one_line = ToolCall(tool="edit", arguments={"path": "a.py", "old": "x", "new": "y"})
    assert variants(write, "x = 1\n") == [] and variants(one_line, "x = 1\n") == []
    assert is_indentation("line 3: unexpected indent")
    assert not is_indentation("line 2: '(' was never closed")
