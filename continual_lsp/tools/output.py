"""Output caps: what a tool hands back is bounded, and says so when it was cut."""

from __future__ import annotations

__all__ = ["CappedBytes", "cap_text", "looks_binary"]

_SNIFF = 8192


def looks_binary(head: bytes) -> bool:
    """A NUL byte in the first 8 KiB marks a binary file (git and grep use the same rule)."""
    return b"\x00" in head[:_SNIFF]


def cap_text(text: str, cap: int, *, keep_tail: bool = False) -> tuple[str, bool]:
    """Cut `text` to about `cap` characters, with a note of how much was cut.

    `keep_tail` keeps the last third as well: a command's error is usually at the end.
    """
    if cap <= 0 or len(text) <= cap:
        return text, False
    cut = len(text) - cap
    if keep_tail:
        head, tail = text[: cap * 2 // 3], text[len(text) - cap // 3 :]
        note = f"\n[... output truncated: {cut} of {len(text)} characters cut here ...]\n"
        return head + note + tail, True
    note = f"\n[output truncated: {cut} of {len(text)} characters cut]"
    return text[:cap] + note, True


class CappedBytes:
    """Collects a stream into a bounded head and tail, counting what falls in between.

    A command may print gigabytes; only `cap` bytes at each end are ever held.
    """

    def __init__(self, cap: int) -> None:
        self.cap = max(cap, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.cap:
                del self.tail[: len(self.tail) - self.cap]

    @property
    def dropped(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self, cap_chars: int) -> tuple[str, bool]:
        """Decoded output (invalid UTF-8 replaced), capped to `cap_chars`, and a truncated flag."""
        if self.dropped == 0:
            return cap_text(
                bytes(self.head + self.tail).decode("utf-8", errors="replace"),
                cap_chars,
                keep_tail=True,
            )
        head = bytes(self.head).decode("utf-8", errors="replace")[: cap_chars * 2 // 3]
        tail = bytes(self.tail).decode("utf-8", errors="replace")
        tail = tail[-(cap_chars // 3) :] if cap_chars // 3 else ""
        shown = len(head.encode("utf-8", errors="replace")) + len(
            tail.encode("utf-8", errors="replace")
        )
        cut = max(self.total - shown, 0)
        note = f"\n[... output truncated: about {cut} of {self.total} bytes cut here ...]\n"
        return head + note + tail, True
