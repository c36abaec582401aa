"""Allow rules: permissions learned from approvals, in the CODE lane.

A rule names a class of calls the reviewer approved again and again: a command prefix
(`pytest -q`, `git status`) with the options those calls gave it, or file changes under a
directory. A command matches when it starts with the prefix and every other option it
passes is one the rule was learned with: a rule learned from `find . -name x` does not
allow `find . -delete` or `find . -exec …`, nor one from `sed -n` allow `sed -i`. It is a
lane item of kind `allow` (per user: the store; per workspace: `spec.allow.workspace`),
shown in the ledger with the approvals it came from, and reverted like any item.

What a rule may never cover, whatever the reviewer clicks: a command that reaches the
network or writes outside the workspace, a shell or interpreter given the command line,
a destructive or history-rewriting command, anything run without the OS sandbox. A
command line is split by the shell's own word rules (`commands.parse`, the parser the
guards use too) and is judged segment by segment: each segment must be a `cd` inside
the workspace or match a rule. A line that is not plain words (a substitution, variable,
redirection, here-document, background job, newline, an operator other than `;`, `&&`,
`||`, `|`) is never allowed. Guards run first and win: the agent consults allow rules
only for a call every guard let through unchanged.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel

from continual_lsp.lanes.guards import commands
from continual_lsp.store.db import Store
from continual_lsp.tools.base import FILE_CHANGING_TOOLS, Preview, ToolCall

KIND = "allow"
PREFIX_WORDS = 3  # `python -m pytest`: enough to name a command, not its targets

# First words a rule never allows: the network, privilege, destruction, programs that run
# their arguments as code (a shell handed `-c …`), and builtins that change how the later
# commands of the line run (`export PATH=.`, `trap`, `pushd /`): each is judged alone.
NEVER = frozenset(
    {
        "curl", "wget", "ssh", "scp", "sftp", "rsync", "nc", "ncat", "netcat", "telnet",
        "ftp", "socat", "ping", "dig", "nslookup", "http", "https", "aria2c",
        "sudo", "su", "doas", "pkexec", "chmod", "chown", "chgrp", "rm", "rmdir", "dd",
        "mkfs", "shred", "truncate", "mv", "ln", "kill", "pkill", "killall", "reboot",
        "shutdown", "crontab", "systemctl", "docker", "podman", "kubectl",
        "sh", "bash", "zsh", "fish", "dash", "ksh", "csh", "eval", "exec", "source", ".",
        "xargs", "env", "nohup", "time", "nice", "timeout", "watch", "command", "builtin",
        "apt", "apt-get", "dpkg", "brew", "snap", "open", "xdg-open",
        "export", "unset", "alias", "trap", "set", "shopt", "declare", "typeset", "local",
        "readonly", "hash", "enable", "pushd", "popd", "let", "read", "mapfile", "ulimit",
        "npx", "bunx", "pnpx", "uvx",
    }
)  # fmt: skip
# Second words that turn an otherwise local tool into a network or history-rewriting one.
NEVER_SUBCOMMANDS = {
    "git": {"push", "pull", "fetch", "clone", "remote", "submodule", "reset", "clean",
            "checkout", "restore", "rebase", "config", "filter-branch", "gc", "lfs"},
    "pip": {"install", "download", "uninstall"},
    "pip3": {"install", "download", "uninstall"},
    "uv": {"pip", "add", "sync", "run", "tool"},
    "npm": {"install", "i", "ci", "add", "publish", "exec", "update", "login"},
    "pnpm": {"install", "i", "add", "dlx", "exec", "publish", "update"},
    "yarn": {"install", "add", "dlx", "publish", "up"},
    "cargo": {"install", "publish", "add", "update"},
    "go": {"get", "install"},
    "gem": {"install"},
}  # fmt: skip
# Interpreters: allowed only with what they run named (`python -m pytest`, not `python`).
INTERPRETERS = frozenset({"python", "python3", "node", "perl", "ruby", "php", "deno", "bun"})


class AllowSpec(BaseModel):
    """What one rule allows (`lane_items.spec["allow"]`)."""

    tool: Literal["bash", "file"]
    prefix: str  # bash: command words; file: a directory ("" is the workspace root)
    workspace: str
    approvals: list[str] = []
    # bash: the options (name before any `=`) the approved calls passed after the prefix;
    # any other option is not allowed. A rule stored before options were named has none.
    flags: list[str] = []

    def summary(self) -> str:
        if self.tool == "file":
            return f"file changes under {self.prefix or 'the workspace root'}"
        if not self.flags:
            return f"bash: `{self.prefix} …`, no other options"
        return f"bash: `{self.prefix} …`, options {' '.join(self.flags)} only"

    def covers(self, words: list[str]) -> bool:
        """A simple command this bash rule allows: its prefix, then only known options."""
        want = shlex.split(self.prefix)
        if words[: len(want)] != want:
            return False
        return all(o is None or o in self.flags for o in map(_option, words[len(want) :]))


class AllowMatch(BaseModel):
    item_id: str
    summary: str


def _outside(word: str) -> bool:
    """A word that names a place outside the workspace (or could)."""
    path = word.split("=", 1)[-1]
    return path.startswith(("/", "~")) or ".." in PurePosixPath(path).parts


def _plain_segments(cmd: str) -> tuple[list[list[str]] | None, str]:
    """The words of each simple command of `cmd`, or (None, why no rule may allow it).

    Wrappers (`sudo`, `env`, `xargs`, …) stay the first word, where `NEVER` refuses them."""
    parsed = commands.parse(cmd)
    if not parsed.plain:
        return None, parsed.problems[0]
    return parsed.segments, ""


def _never(words: list[str]) -> str | None:
    if not words:
        return "it is empty"
    first = PurePosixPath(words[0]).name
    if first in NEVER:
        return f"`{first}` can reach the network, escape the workspace or run any command"
    if len(words) > 1 and words[1] in NEVER_SUBCOMMANDS.get(first, ()):
        return f"`{first} {words[1]}` can reach the network or rewrite history"
    if first in INTERPRETERS and (len(words) < 3 or words[1] != "-m"):
        return f"`{first}` runs arbitrary code; only `{first} -m <module>` can be allowed"
    if any(_outside(w) for w in words[1:]):
        return "it names a path outside the workspace"
    return None


def _is_cd(words: list[str]) -> bool:
    """`cd dir` inside the workspace: moves the segments after it, changes nothing."""
    return len(words) == 2 and words[0] == "cd" and not _outside(words[1]) and words[1] != "-"


def _option(word: str) -> str | None:
    """The option a word passes (`-delete`, `--max=3` -> `--max`), None for an operand.

    Every word after `--` is judged too: a rule is learned from what it saw, not from
    each program's option grammar."""
    if len(word) > 1 and word[0] == "-":
        return word.split("=", 1)[0]
    return None


def bash_class(cmd: str) -> tuple[tuple[str, list[str]] | None, str]:
    """The command prefix and options a rule for `cmd` would allow, or (None, why it
    cannot be)."""
    segments, why = _plain_segments(cmd)
    if segments is None:
        return None, why
    work = [w for w in segments if not _is_cd(w)]
    if len(work) != 1:
        return None, "only a single command (after any `cd`) can become a rule"
    words = work[0]
    why = _never(words)
    if why:
        return None, why
    prefix: list[str] = []
    for word in words[:PREFIX_WORDS]:
        if "/" in word or "=" in word or (prefix and "." in word):
            break
        prefix.append(word)
    flags = sorted({o for o in map(_option, words[len(prefix) :]) if o is not None})
    return (shlex.join(prefix), flags), ""


def file_class(call: ToolCall, preview: Preview | None) -> tuple[str | None, str]:
    if call.tool not in FILE_CHANGING_TOOLS or preview is None:
        return None, "only file changes with a preview inside the workspace"
    parent = PurePosixPath(preview.path).parent.as_posix()
    if parent.split("/")[0] == ".git":
        return None, "git's own files are never allowed"
    return ("" if parent == "." else parent + "/"), ""


def call_class(
    call: ToolCall, preview: Preview | None, workspace: str
) -> tuple[AllowSpec | None, str]:
    """The rule that would allow `call`, or (None, why none can)."""
    if call.tool == "bash":
        found, why = bash_class(str(call.arguments.get("cmd", "")))
        if found is None:
            return None, why
        prefix, flags = found
        return AllowSpec(tool="bash", prefix=prefix, flags=flags, workspace=workspace), ""
    if call.tool not in FILE_CHANGING_TOOLS:
        return None, f"{call.tool} is read-only: the read-only autonomy mode covers it"
    directory, why = file_class(call, preview)
    if directory is None:
        return None, why
    return AllowSpec(tool="file", prefix=directory, workspace=workspace), ""


def rules(store: Store, workspace: str) -> list[tuple[str, AllowSpec]]:
    """The active allow rules of `workspace`: (item id, spec)."""
    out = []
    for item in store.lane_items(lane="CODE", active_only=True):
        if item.get("kind") == KIND:
            spec = AllowSpec.model_validate(item["spec"]["allow"])
            if spec.workspace == workspace:
                out.append((item["id"], spec))
    return out


def match(
    store: Store, call: ToolCall, preview: Preview | None, workspace: str
) -> AllowMatch | None:
    """The rule that allows `call` to run without the reviewer, or None.

    A command is allowed only when every segment is a `cd` inside the workspace or one a
    rule covers (its prefix, no option the rule was not learned with), and no segment is
    one a rule may never allow."""
    return _first(rules(store, workspace), call, preview, workspace)


def _first(
    active: list[tuple[str, AllowSpec]], call: ToolCall, preview: Preview | None, workspace: str
) -> AllowMatch | None:
    if not active:
        return None
    if call.tool == "bash":
        segments, _ = _plain_segments(str(call.arguments.get("cmd", "")))
        if segments is None:
            return None
        hit: tuple[str, AllowSpec] | None = None
        for words in segments:
            if _is_cd(words):
                continue
            if _never(words):
                return None
            found = next(
                ((i, s) for i, s in active if s.tool == "bash" and s.covers(words)),
                None,
            )
            if found is None:
                return None
            hit = hit or found
        return AllowMatch(item_id=hit[0], summary=hit[1].summary()) if hit else None
    cls, _ = call_class(call, preview, workspace)
    if cls is None or cls.tool != "file":
        return None
    for item_id, spec in active:
        if spec.tool == "file" and cls.prefix.startswith(spec.prefix):
            return AllowMatch(item_id=item_id, summary=spec.summary())
    return None


def approvals_of(store: Store, spec: AllowSpec) -> list[str]:
    """Proposal ids the reviewer approved in the rule's workspace that the rule covers."""
    out = []
    for row in store.approved_proposals(spec.workspace):
        call = ToolCall(tool=row["tool"], arguments=row["arguments"])
        preview = None
        if row["path"] is not None:
            preview = Preview(
                path=row["path"], old_content=None, new_content="", diff="", old_sha256=None
            )
        if _first([("", spec)], call, preview, spec.workspace) is not None:
            out.append(row["id"])
    return out


def offer(
    store: Store, call: ToolCall, preview: Preview | None, workspace: str, after: int
) -> tuple[AllowSpec, list[str]] | None:
    """The rule to offer for `call` once the reviewer approved `after` calls of its class
    (and none covers it yet)."""
    spec, _ = call_class(call, preview, workspace)
    if spec is None or match(store, call, preview, workspace) is not None:
        return None
    approvals = approvals_of(store, spec)
    return (spec, approvals) if len(approvals) >= after else None


def add_rule(store: Store, spec: AllowSpec, source: str | None, learned: bool) -> str:
    """Persist `spec` as an allow item (or return the active one for the same class)."""
    for item_id, existing in rules(store, spec.workspace):
        if (existing.tool, existing.prefix, existing.flags) == (spec.tool, spec.prefix, spec.flags):
            return item_id
    n = len(spec.approvals)
    how = f"learned after {n} approvals" if learned else f"allowed by the reviewer ({n} approvals)"
    item: dict[str, Any] = {
        "text": f"Always allow {spec.summary()}",
        "lane": "CODE",
        "reason": f"An allow rule, {how}; guards and deny rules still run first.",
        "kind": KIND,
        "spec": {"allow": spec.model_dump()},
        "source": source,
    }
    return store.add_lane_item(item)
