"""The workspace: previews and runs the seven tools, every path jailed to the root
(`done`, the eighth answer, runs as a no-op: the agent ends the task).

Lifecycle of a file-changing call (write, edit, edit_lines):

1. ``preview(call)`` computes the new content, a unified diff, the sha256 of the
   bytes on disk and the changed line range: nothing is written.
2. The reviewer approves; ``execute(call, preview=p)`` (or ``apply_preview(p)``)
   checks that the file still has the bytes the preview saw and writes the result
   atomically. A file changed in between raises StaleProposalError.

Every error a call can meet comes out as ToolError (bad arguments, missing file,
path escape, permission, ...): the agent shows it to the reviewer and the model.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import itertools
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from pydantic import ValidationError

from continual_lsp.config import Settings
from continual_lsp.text import hidden_char, shown_path, split_lines
from continual_lsp.tools import jail
from continual_lsp.tools.base import (
    FILE_CHANGING_TOOLS,
    BashArgs,
    DoneArgs,
    EditArgs,
    EditLinesArgs,
    GlobArgs,
    GrepArgs,
    Preview,
    ReadArgs,
    StaleProposalError,
    ToolCall,
    ToolError,
    ToolResult,
    WriteArgs,
    _Args,
)
from continual_lsp.tools.bash import run_bash
from continual_lsp.tools.gitlayout import is_git_path
from continual_lsp.tools.output import cap_text, looks_binary
from continual_lsp.tools.sandbox import sandbox_status
from continual_lsp.tools.search import iter_files, run_glob, run_grep
from continual_lsp.tools.text_edits import (
    apply_edit,
    apply_edit_lines,
    changed_range,
    file_diff,
)

__all__ = ["MAX_EDIT_BYTES", "MAX_LINE_CHARS", "ToolRunner", "sha256_of"]

MAX_EDIT_BYTES = 10 * 1024 * 1024  # larger files are not edited through a text diff
MAX_LINE_CHARS = 2000  # `read` cuts longer lines (minified code would eat the cap)
READ_CHUNK = 64 * 1024  # `read` holds at most this much of one line


def sha256_of(path: Path) -> str | None:
    """sha256 of the file's bytes, or None if there is no file."""
    try:
        with open(path, "rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return None


def _parse(call: ToolCall) -> _Args:
    try:
        return call.parsed()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ToolError(f"invalid arguments for {call.tool}: {problems}") from None


class ToolRunner:
    """One workspace root and the settings its tools run under.

    `env` is the environment bash commands get (default: this process's), `home`
    the home directory whose secrets the sandbox hides (default: $HOME of `env`).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        settings: Settings | None = None,
        *,
        env: Mapping[str, str] | None = None,
        home: str | os.PathLike[str] | None = None,
    ) -> None:
        self.root: Path = jail.real_root(root)
        self.settings: Settings = settings if settings is not None else Settings()
        self.env: dict[str, str] | None = dict(env) if env is not None else None
        self.home: str | os.PathLike[str] | None = home

    # -- paths ---------------------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """`path` inside the workspace, canonical; PathEscapeError if it leaves it."""
        return jail.resolve(self.root, path)

    def rel(self, path: Path) -> str:
        """Root-relative POSIX display path."""
        return jail.display(self.root, path)

    def target_path(self, call: ToolCall) -> str | None:
        """Root-relative path a call reads or changes (None for bash, or a bad path)."""
        path = call.arguments.get("path")
        if not isinstance(path, str) or not path:
            return None
        try:
            return self.rel(self.resolve(path))
        except ToolError:
            return None

    def listed_files(self, limit: int) -> list[str] | None:
        """The workspace's files as glob and grep see them (root-relative, sorted), or
        None when there are more than `limit` (or `limit` is 0): a listing that long is
        too slow to walk every turn and too big to decode paths from."""
        if limit <= 0:
            return None
        files = list(itertools.islice(iter_files(self.root, self.root), limit + 1))
        if len(files) > limit:
            return None
        names = (self.rel(path) for path in files)
        # A name that is not UTF-8 cannot be written in a JSON call anyway.
        return [name for name in names if name.isprintable() and _is_utf8(os.fsencode(name))]

    def sandbox_status(self) -> tuple[bool, str | None]:
        """(sandboxed, note): put the note in a bash proposal when it is not None."""
        return sandbox_status(self.settings)

    def sandbox_note(self, call: ToolCall) -> str | None:
        """For a bash call, what the reviewer must know about its sandbox (None: nothing)."""
        if call.tool != "bash":
            return None
        return sandbox_status(self.settings)[1]

    def check_fresh(self, preview: Preview) -> None:
        """StaleProposalError unless the file still holds the bytes the preview saw."""
        try:
            path = self.resolve(preview.path)
            current = sha256_of(path)
        except ToolError:
            raise
        except (OSError, ValueError) as exc:
            raise ToolError(f"{preview.path}: {_os_message(exc)}") from exc
        if current != preview.old_sha256:
            raise StaleProposalError(
                f"stale proposal: {preview.path} changed on disk since it was proposed"
            )

    def already_applied(self, preview: Preview) -> bool:
        """True if the file already holds the preview's new content (crash recovery)."""
        try:
            path = self.resolve(preview.path)
            return sha256_of(path) == hashlib.sha256(preview.new_content.encode()).hexdigest()
        except (ToolError, OSError, ValueError):
            return False

    # -- preview -------------------------------------------------------------------

    def preview(self, call: ToolCall) -> Preview | None:
        """What a file-changing call would do, without writing; None for other tools."""
        if call.tool not in FILE_CHANGING_TOOLS:
            _parse(call)  # still report bad arguments early
            return None
        try:
            return self._preview(_parse(call))
        except ToolError:
            raise
        except (OSError, ValueError) as exc:
            raise ToolError(f"{call.tool}: {_os_message(exc)}") from exc

    def _read_current(self, path: Path, rel: str) -> bytes | None:
        if path.is_dir():
            raise ToolError(f"{rel} is a directory")
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return None
        if not path.is_file():
            # A fifo would block the server for ever; a socket cannot be read at all.
            raise ToolError(f"{rel} is not a regular file")
        if size > MAX_EDIT_BYTES:
            raise ToolError(
                f"{rel} is {size} bytes; files over {MAX_EDIT_BYTES} bytes are not edited"
            )
        with open(path, "rb") as fh:
            return fh.read()

    def _text_of(self, data: bytes | None, rel: str, tool: str) -> str:
        if data is None:
            raise ToolError(f"{tool} {rel}: no such file; use write to create it")
        if looks_binary(data):
            raise ToolError(f"{tool} {rel}: binary file; it cannot be edited as text")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolError(
                f"{tool} {rel}: not valid UTF-8 (byte {exc.start}); it cannot be edited safely"
            ) from None

    def _preview(self, args: _Args) -> Preview:
        if not isinstance(args, WriteArgs | EditArgs | EditLinesArgs):
            raise ToolError(f"{type(args).__name__} does not change files")
        hidden = "".join(dict.fromkeys(ch for ch in args.path if hidden_char(ch)))
        if hidden:
            codes = ", ".join(f"U+{ord(ch):04X}" for ch in hidden)
            raise ToolError(
                f"path {shown_path(args.path)} holds {codes}: invisible or text-reordering"
                " characters; a file name with them is not written (a reviewer could not"
                " see the name it gets)"
            )
        path = self.resolve(args.path)
        rel = self.rel(path)
        if path == self.root:
            raise ToolError(f"{args.path!r} is the workspace root, not a file")
        why = is_git_path(self.root, path)
        if why is not None:
            # The host's git runs what a repository's config and hooks name.
            raise ToolError(f"{why}: the file tools do not write git metadata")
        data = self._read_current(path, rel)
        sha = hashlib.sha256(data).hexdigest() if data is not None else None
        if isinstance(args, WriteArgs):
            if data is not None and (looks_binary(data) or not _is_utf8(data)):
                return Preview(
                    path=rel,
                    old_content=data.decode("utf-8", errors="replace"),
                    new_content=args.content,
                    diff=file_diff(None, args.content, rel, binary=True),
                    old_sha256=sha,
                    changed_lines=(1, max(len(split_lines(data.decode("utf-8", "replace"))), 1)),
                )
            old = data.decode("utf-8") if data is not None else None
            new = args.content
        elif isinstance(args, EditArgs):
            old = self._text_of(data, rel, "edit")
            new, _count = apply_edit(old, args.old, args.new, bool(args.all), rel)
        else:
            old = self._text_of(data, rel, "edit_lines")
            new = apply_edit_lines(old, args.start, args.end, args.content, rel)
        return Preview(
            path=rel,
            old_content=old,
            new_content=new,
            diff=file_diff(old, new, rel),
            old_sha256=sha,
            changed_lines=changed_range(old, new) if old is not None else None,
        )

    # -- execute -------------------------------------------------------------------

    def execute(
        self,
        call: ToolCall,
        expected_sha256: str | None = None,
        *,
        preview: Preview | None = None,
    ) -> ToolResult:
        """Run one call. For file-changing calls, staleness is checked first:

        - `preview` given (the one shown to the reviewer): the file must still hold the
          bytes it was computed from; a file that did not exist must still not exist;
        - else `expected_sha256` given: the file's bytes must hash to it;
        - else nothing is checked (a reviewer-edited call, say).

        Raises StaleProposalError on a mismatch, ToolError on any other failure.
        """
        try:
            return self._execute(call, expected_sha256, preview)
        except ToolError:
            raise
        except (OSError, ValueError) as exc:
            raise ToolError(f"{call.tool}: {_os_message(exc)}") from exc

    def apply_preview(self, preview: Preview) -> ToolResult:
        """Write a preview's new content if the file is unchanged since the preview."""
        try:
            path = self.resolve(preview.path)
            self._write_checked(path, preview.new_content, preview.old_sha256, check=True)
        except ToolError:
            raise
        except (OSError, ValueError) as exc:
            raise ToolError(f"write {preview.path}: {_os_message(exc)}") from exc
        return ToolResult(ok=True, output=_summary(preview))

    def _execute(
        self, call: ToolCall, expected_sha256: str | None, preview: Preview | None
    ) -> ToolResult:
        args = _parse(call)
        if isinstance(args, ReadArgs):
            return self._read(args)
        if isinstance(args, GlobArgs):
            base = self.resolve(args.path) if args.path else self.root
            return run_glob(self.root, args.pat, base, self.settings.output_cap)
        if isinstance(args, GrepArgs):
            base = self.resolve(args.path) if args.path else self.root
            return run_grep(self.root, args.pat, base, self.settings.output_cap)
        if isinstance(args, DoneArgs):
            return ToolResult(ok=True, output="task finished")
        if isinstance(args, BashArgs):
            return run_bash(
                args.cmd,
                self.root,
                self.settings,
                timeout=args.timeout,
                env=self.env,
                home=self.home,
            )
        fresh = self._preview(args)
        if preview is not None:
            if preview.path != fresh.path:
                raise ToolError(
                    f"the preview is for {preview.path} but the call changes {fresh.path}"
                )
            expected, check = preview.old_sha256, True
        else:
            expected, check = expected_sha256, expected_sha256 is not None
        if check and fresh.old_sha256 != expected:
            raise StaleProposalError(
                f"stale proposal: {fresh.path} changed on disk since it was proposed"
            )
        path = self.resolve(fresh.path)
        self._write_checked(path, fresh.new_content, fresh.old_sha256, check=True)
        return ToolResult(ok=True, output=_summary(fresh))

    def _write_checked(
        self, path: Path, content: str, expected: str | None, *, check: bool
    ) -> None:
        rel = self.rel(path)
        if check and sha256_of(path) != expected:
            raise StaleProposalError(f"stale proposal: {rel} changed on disk since it was proposed")
        if path.is_dir():
            raise ToolError(f"{rel} is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        # mkdir may have walked through a symlink created meanwhile: check again.
        self.resolve(str(path))
        data = content.encode("utf-8")
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            # New file: O_EXCL + O_NOFOLLOW, so a link planted at the last moment is refused
            # and the process umask applies as it would for any editor.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            return
        # Existing file: write a sibling and rename over it, so a crash never leaves half
        # a file; os.replace swaps the name and never writes through a symlink.
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    # -- read ----------------------------------------------------------------------

    def _read(self, args: ReadArgs) -> ToolResult:
        path = self.resolve(args.path)
        rel = self.rel(path)
        if path.is_dir():
            raise ToolError(f"{rel} is a directory; use glob to list its files")
        if not path.exists():
            raise ToolError(f"no such file: {rel}")
        if not path.is_file():
            raise ToolError(f"{rel} is not a regular file")  # a fifo would block for ever
        cap = self.settings.output_cap
        offset = args.offset or 1
        size = path.stat().st_size
        with open(path, "rb") as fh:
            if looks_binary(fh.read(8192)):
                return ToolResult(
                    ok=True, output=f"{rel} is a binary file ({size} bytes); contents not shown"
                )
            fh.seek(0)
            if size == 0:
                return ToolResult(ok=True, output=f"{rel} is empty")
            out: list[str] = []
            used = 0
            number = 0
            last_shown = 0
            note: str | None = None
            truncated = False
            for head, chars, start in _chunked_lines(fh):
                number += 1
                if number < offset:
                    continue
                if args.limit is not None and number >= offset + args.limit:
                    note = f"[more lines follow; read on with offset={number}]"
                    break
                line = head.decode("utf-8", errors="replace").rstrip("\n").removesuffix("\r")
                chars = chars if chars is not None else len(line)
                if chars > MAX_LINE_CHARS:
                    line = line[:MAX_LINE_CHARS] + f" [... line cut, {chars} characters]"
                entry = f"{number:6d}\t{line}"
                if out and used + len(entry) + 1 > cap:
                    note = (
                        f"[output truncated at {cap} characters: showed lines {offset}-"
                        f"{last_shown}; about {size - start} more bytes; read on with "
                        f"offset={number}]"
                    )
                    truncated = True
                    break
                out.append(entry)
                used += len(entry) + 1
                last_shown = number
        if not out:
            raise ToolError(
                f"read {rel}: offset {offset} is past the end of the file ({number} lines)"
            )
        # Backstop for tiny caps: the line loop always shows at least one line. The
        # note is added after the cut so that how to read on is never cut away.
        text, cut = cap_text("\n".join(out), cap)
        if note:
            text += "\n" + note
        return ToolResult(ok=True, output=text, truncated=truncated or cut)


def _chunked_lines(fh: BinaryIO) -> Iterator[tuple[bytes, int | None, int]]:
    """(head, characters, start offset) of each line, read READ_CHUNK bytes at a time.

    A line longer than one chunk yields only its first chunk, with its length in
    characters counted as the rest streams past (None: the head is the whole line), so
    a 400 MB one-line file is never held whole.
    """
    while True:
        start = fh.tell()
        head = fh.readline(READ_CHUNK)
        if not head:
            return
        if head.endswith(b"\n") or len(head) < READ_CHUNK:
            yield head, None, start
            continue
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        chars = len(decoder.decode(head))
        while True:
            more = fh.readline(READ_CHUNK)
            last = not more or more.endswith(b"\n")
            text = decoder.decode(more, final=last)
            chars += len(text.removesuffix("\n").removesuffix("\r") if last else text)
            if last:
                break
        yield head, chars, start


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _os_message(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or exc}{where}"
    return str(exc)


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


def _summary(preview: Preview) -> str:
    lines = _lines(len(split_lines(preview.new_content)))
    if preview.old_content is None:
        return f"Created {preview.path} ({lines})"
    if preview.changed_lines is None:
        return f"{preview.path} unchanged"
    lo, hi = preview.changed_lines
    span = f"line {lo}" if lo == hi else f"lines {lo}-{hi}"
    return f"Updated {preview.path}: changed {span} of the old file; now {lines}"
