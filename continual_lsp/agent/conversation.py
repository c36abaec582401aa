"""One task's conversation, kept as plain messages and rendered per turn.

The prompt stays bounded: only the most recent calls are shown in full, older ones are
summarised in one line, and tool output is clipped. Notes and reviewer feedback are
clipped to NOTE_CHARS each, and the notes of one prompt to NOTES_CHARS: the newest are
kept, the oldest summarised in one line (two 9.8k-character notes once left no room for
any later turn). A 135M model has an 8k window and
CPU prefill costs ~2 ms a token, so every token here is paid on every turn.
"""

from __future__ import annotations

import re

from continual_lsp.policy.base import Message
from continual_lsp.policy.render import call_text
from continual_lsp.text import clip
from continual_lsp.tools.base import ToolCall, ToolResult

KEEP_CALLS = 6
RESULT_CHARS = 1500
NOTE_CHARS = 600
NOTES_CHARS = 1000
LINE_CHARS = 300  # one line of a clipped result (a minified file is one long line)
# Lines that say where and why something failed: kept first when a long result is cut, so
# a test run's assertion and file:line survive the runner's progress and stack frames.
KEY_LINE = re.compile(
    r"error|assert|fail|traceback|not ok|no such file|not found|expected|actual"
    r"|\S+\.\w+:\d+",
    re.IGNORECASE,
)


def clip_result(output: str, limit: int = RESULT_CHARS) -> str:
    """`output` within about `limit` characters: the key lines (`KEY_LINE`, newest first, up
    to 60 % of the room), then as many last lines, then first lines as fit, in their order,
    each gap marked with how many lines were cut. The agent and the curriculum both render
    results through this, so the model trains on what it will see."""
    if len(output) <= limit:
        return output
    lines = [clip(line, LINE_CHARS, say_cut=True) for line in output.split("\n")]
    keep: set[int] = set()
    used = 0

    def take(i: int, room: int) -> bool:
        nonlocal used
        cost = len(lines[i]) + 1
        if i in keep:
            return True
        if used + cost > room:
            return False
        keep.add(i)
        used += cost
        return True

    for i in reversed(range(len(lines))):
        if KEY_LINE.search(lines[i]):
            take(i, limit * 3 // 5)
    for i in reversed(range(len(lines))):
        if not take(i, limit):
            break
    for i in range(len(lines)):
        if not take(i, limit):
            break
    out: list[str] = []
    gap = 0
    for i, line in enumerate(lines):
        if i in keep:
            if gap:
                out.append(f"… ({gap} lines cut)")
            out.append(line)
            gap = 0
        else:
            gap += 1
    if gap:
        out.append(f"… ({gap} lines cut)")
    return "\n".join(out)


# What test runners print of their own timing: it differs from one run to the next and
# says nothing of the code. In the prompt it made two runs of the same agent on the
# same tasks differ (8 of 24 held-out multi-step tasks took other calls, and the
# finished count moved by two).
_TIMINGS = (
    # pytest's summary ("1 failed, 2 passed in 0.05s", "(0:01:01)"), unittest's "Ran 3
    # tests in 0.001s"
    (re.compile(r" in \d+(?:\.\d+)?s(?: \(\d+:\d\d:\d\d\))?(?=\W*$)", re.M), ""),
    # node:test's TAP ("duration_ms: 2.23", "# duration_ms 61.5") and spec ("ℹ
    # duration_ms 55.2", "✔ adds (1.23ms)")
    (re.compile(r"^[ \t]*[#ℹ]?[ \t]*duration_ms:?[ \t]+[\d.]+[ \t]*\n?", re.M), ""),
    (re.compile(r" \(\d+(?:\.\d+)?ms\)$", re.M), ""),
)


def steady(output: str) -> str:
    """`output` without the timings a test runner prints (`_TIMINGS`)."""
    for pattern, replacement in _TIMINGS:
        output = pattern.sub(replacement, output)
    return output


def result_text(result: ToolResult) -> str:
    """A result as the next prompt shows it: a failed command's exit code, then the
    clipped output (a test run that fails says so before its first line), without the
    runners' timings (`steady`)."""
    output = clip_result(steady(result.output)) or "(no output)"
    if result.exit_code not in (None, 0):
        return f"(exit code {result.exit_code})\n{output}"
    return output


class Conversation:
    def __init__(self, task_text: str) -> None:
        self.task_text = task_text
        self.notes: list[str] = []
        self.feedback: list[str] = []
        self.calls: list[tuple[ToolCall, ToolResult]] = []

    def add_note(self, text: str) -> None:
        self.notes.append(text)

    def add_feedback(self, correction: str) -> None:
        """Reviewer feedback on a denied call. The denied call itself is not kept: a small
        model shown its own rejected call tends to propose it again."""
        self.feedback.append(correction)

    def add_call(self, call: ToolCall, result: ToolResult) -> None:
        self.calls.append((call, result))
        # Feedback answered a specific denied proposal; once a call ran, it has been acted on.
        self.feedback = []

    def recent_calls(self) -> list[ToolCall]:
        return [c for c, _ in self.calls[-KEEP_CALLS:]]

    def recent_paths(self) -> list[str]:
        paths = [c.arguments.get("path") for c, _ in self.calls[-KEEP_CALLS:]]
        return [p for p in paths if isinstance(p, str)]

    def _notes_text(self) -> str:
        shown: list[str] = []
        used = 0
        for note in reversed(self.notes):
            line = f"- {clip(note, NOTE_CHARS, say_cut=True)}"
            if shown and used + len(line) > NOTES_CHARS:
                break
            shown.append(line)
            used += len(line) + 1
        older = self.notes[: len(self.notes) - len(shown)]
        text = "Notes:\n" + "\n".join(reversed(shown))
        if older:
            plural = "s" if len(older) > 1 else ""
            heads = "; ".join(clip(n, 40, say_cut=True) for n in older[-3:])
            text = f"({len(older)} earlier note{plural} omitted: {heads})\n" + text
        return text

    def messages(self, bullets: list[str] | None = None, keep: int = KEEP_CALLS) -> list[Message]:
        user = [f"Task: {self.task_text}"]
        if bullets:
            user.append("Rules from the reviewer:\n" + "\n".join(f"- {b}" for b in bullets))
        if self.notes:
            user.append(self._notes_text())
        msgs = [Message(role="user", content="\n\n".join(user))]
        cut = max(0, len(self.calls) - keep)  # fewer calls than `keep`: all of them
        older, recent = self.calls[:cut], self.calls[cut:]
        if older:
            summary = ", ".join(f"{c.tool} {c.arguments.get('path', '')}".strip() for c, _ in older)
            msgs.append(
                Message(role="user", content=f"({len(older)} earlier calls omitted: {summary})")
            )
        for call, result in recent:
            msgs.append(Message(role="assistant", content=call_text(call)))
            msgs.append(Message(role="tool", content=result_text(result)))
        if self.feedback:
            msgs.append(
                Message(
                    role="user",
                    content="The reviewer denied your last call: "
                    + " ".join(clip(f, NOTE_CHARS, say_cut=True) for f in self.feedback)
                    + "\nPropose a different call.",
                )
            )
        return msgs
