"""One task's conversation, kept as plain messages and rendered per turn.

The prompt stays bounded: only the most recent calls are shown in full, older ones are
summarised in one line, and tool output is clipped. Notes and reviewer feedback are
clipped to NOTE_CHARS each, and the notes of one prompt to NOTES_CHARS: the newest are
kept, the oldest summarised in one line (two 9.8k-character notes once left no room for
any later turn). A 135M model has an 8k window and
CPU prefill costs ~2 ms a token, so every token here is paid on every turn.
"""

from __future__ import annotations

from continual_lsp.policy.base import Message
from continual_lsp.policy.render import call_text
from continual_lsp.text import clip
from continual_lsp.tools.base import ToolCall, ToolResult

KEEP_CALLS = 6
RESULT_CHARS = 1500
NOTE_CHARS = 600
NOTES_CHARS = 1000


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
        cut = len(self.calls) - keep
        older, recent = self.calls[:cut], self.calls[cut:]
        if older:
            summary = ", ".join(f"{c.tool} {c.arguments.get('path', '')}".strip() for c, _ in older)
            msgs.append(
                Message(role="user", content=f"({len(older)} earlier calls omitted: {summary})")
            )
        for call, result in recent:
            msgs.append(Message(role="assistant", content=call_text(call)))
            output = result.output
            if len(output) > RESULT_CHARS:
                output = (
                    output[:RESULT_CHARS] + f"\n… ({len(result.output) - RESULT_CHARS} chars cut)"
                )
            msgs.append(Message(role="tool", content=output or "(no output)"))
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
