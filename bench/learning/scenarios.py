"""Correction scenarios: training situations, held-out situations, a scripted reviewer.

Each scenario teaches one rule. A *situation* is one agent turn on a sample workspace in
`examples/bench-workspaces/`: the task, the calls already made in it (their results are
produced by the real tools on the workspace files, so prompts look exactly like the
agent's), the reviewer's correction when the agent breaks the rule, the call the reviewer
would accept (the demonstration, given as an edit) and a call that breaks the rule (for the
log-probability margin). Held-out situations use other files, other names and other tasks
than every training situation of every scenario (`check_disjoint` asserts it), so a method
that only memorised its training calls scores nothing there.

Checkers judge a proposal that may have been cut at the scenario's token budget (the
budget is sized to reach the field being judged), so they take a `Judged` call whose
arguments are those the model finished or started writing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
WORKSPACES = REPO / "examples" / "bench-workspaces"
FILE_TOOLS = ["write", "edit", "edit_lines"]


@dataclass(frozen=True)
class Judged:
    """A proposal as the checker sees it: tool and the arguments written so far."""

    tool: str | None
    arguments: dict[str, Any]
    complete: bool  # parsed as one whole valid call


@dataclass(frozen=True)
class Situation:
    id: str
    workspace: str
    task: str
    # Calls already made in this turn's conversation: (tool, arguments, output). Output
    # None = run the call (read-only) on the workspace to get the real tool output.
    history: tuple[tuple[str, dict[str, Any], str | None], ...]
    demo: dict[str, Any]  # the call the reviewer accepts (ToolCall dump)
    violation: dict[str, Any]  # a call that breaks the rule
    correction: str  # what the reviewer types when denying a violating proposal
    names: tuple[str, ...]  # identifiers / packages / scripts the situation is about

    def paths(self) -> set[str]:
        """Workspace files this situation shows or touches."""
        out = {str(a["path"]) for _, a, _ in self.history if isinstance(a.get("path"), str)}
        for call in (self.demo, self.violation):
            path = call["arguments"].get("path")
            if isinstance(path, str):
                out.add(path)
        return out


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    rule: str  # the context lane's bullet (one per rule, however many corrections)
    tools: list[str]  # tools the grammar allows at this decision (isolates the rule)
    max_tokens: int  # decode budget: enough to reach the judged field
    check: Callable[[Judged], bool]
    check_doc: str
    train: list[Situation] = field(default_factory=list)
    held_out: list[Situation] = field(default_factory=list)


# -- helpers ----------------------------------------------------------------------------------


@cache
def file_text(workspace: str, path: str) -> str:
    return (WORKSPACES / workspace / path).read_text()


def _lines(workspace: str, path: str, start: int, end: int, content: str) -> dict[str, Any]:
    return {
        "tool": "edit_lines",
        "arguments": {"path": path, "start": start, "end": end, "content": content},
    }


def _rewrite(workspace: str, path: str, start: int, end: int, content: str) -> dict[str, Any]:
    """The same change as `_lines`, made by rewriting the whole file with `write`."""
    lines = file_text(workspace, path).split("\n")
    new = [*lines[: start - 1], *content.split("\n"), *lines[end:]]
    return {"tool": "write", "arguments": {"path": path, "content": "\n".join(new)}}


def _read(path: str) -> tuple[str, dict[str, Any], None]:
    return ("read", {"path": path}, None)


def _bash(cmd: str) -> dict[str, Any]:
    return {"tool": "bash", "arguments": {"cmd": cmd}}


def _correction(templates: list[str], sid: str, **fields: str) -> str:
    """The reviewer's wording for situation `sid`: rotated by its number, so consecutive
    corrections are phrased differently, as a person's would be."""
    return templates[int(sid.rsplit("-", 1)[-1]) % len(templates)].format(**fields)


# -- 1. tool choice: edit_lines, not write, on an existing file --------------------------------

PY = "py-service"
_TOOL_CORRECTIONS = [
    "Don't rewrite {path} with write, it already exists. Change only the lines you need with edit_lines.",
    "No: {path} exists, so use edit_lines on the lines that change instead of writing the whole file.",
    "Please use edit_lines for {path}; rewriting an existing file with write loses unrelated changes.",
    "Use edit_lines here, not write: {path} is an existing file.",
]


def _tool_situation(
    sid: str, path: str, task: str, span: tuple[int, int], content: str, names: tuple[str, ...]
) -> Situation:
    return Situation(
        id=sid,
        workspace=PY,
        task=task,
        history=(_read(path),),
        demo=_lines(PY, path, *span, content),
        violation=_rewrite(PY, path, *span, content),
        correction=_correction(_TOOL_CORRECTIONS, sid, path=path),
        names=names,
    )


def _check_tool(c: Judged) -> bool:
    return c.tool == "edit_lines"


TOOL_CHOICE = Scenario(
    name="tool_choice",
    title="edit_lines, not write, on an existing file",
    rule="Change an existing file with edit_lines, never by rewriting it with write.",
    tools=FILE_TOOLS,
    max_tokens=16,
    check=_check_tool,
    check_doc="tool == edit_lines",
    train=[
        _tool_situation(
            "tool-train-0", "src/calc/ops.py", "add() returns a - b; make it return a + b.",
            (2, 2), "    return a + b", ("add",),
        ),
        _tool_situation(
            "tool-train-1", "src/calc/ops.py",
            "Add a docstring to mul() saying that it multiplies two numbers.",
            (5, 5), 'def mul(a, b):\n    """Multiply two numbers."""', ("mul",),
        ),
        _tool_situation(
            "tool-train-2", "src/calc/stats.py", "mean() crashes on an empty list; return 0.0 for it.",
            (1, 2), "def mean(values):\n    if not values:\n        return 0.0\n    return sum(values) / len(values)",
            ("mean",),
        ),
        _tool_situation(
            "tool-train-3", "src/calc/stats.py", "Rename spread() to value_range().",
            (5, 5), "def value_range(values):", ("spread", "value_range"),
        ),
        _tool_situation(
            "tool-train-4", "src/text/slug.py", "slugify() should lowercase the title.",
            (2, 2), '    return title.lower().replace(" ", "-")', ("slugify",),
        ),
        _tool_situation(
            "tool-train-5", "src/text/slug.py", "is_slug() should also reject uppercase letters.",
            (6, 6), '    return " " not in text and text == text.lower()', ("is_slug",),
        ),
        _tool_situation(
            "tool-train-6", "src/text/wrap.py", "Change the default width of wrap() to 80.",
            (1, 1), "def wrap(text, width=80):", ("wrap",),
        ),
        _tool_situation(
            "tool-train-7", "src/text/wrap.py", "indent() should indent with four spaces.",
            (6, 6), '    return "    " + text', ("indent",),
        ),
    ],
    held_out=[
        _tool_situation(
            "tool-held-0", "src/shop/cart.py",
            "cart_total() subtracts 1 by mistake; return the plain sum of the prices.",
            (2, 2), "    return sum(item.price for item in items)", ("cart_total",),
        ),
        _tool_situation(
            "tool-held-1", "src/geo/distance.py", "miles_to_km() should use the exact factor 1.609344.",
            (2, 2), "    return miles * 1.609344", ("miles_to_km",),
        ),
        _tool_situation(
            "tool-held-2", "src/util/retry.py", "Allow up to 3 attempts in the retry helper.",
            (1, 1), "MAX_ATTEMPTS = 3", ("MAX_ATTEMPTS", "should_retry"),
        ),
        _tool_situation(
            "tool-held-3", "src/report/table.py", "header_row() should put spaces around the separators.",
            (2, 2), '    return " | ".join(columns)', ("header_row",),
        ),
    ],
)  # fmt: skip


# -- 2. command choice: the project's package manager -------------------------------------------

WEB = "web-app"


def _pm_situation(sid: str, task: str, good: str, bad: str, names: tuple[str, ...]) -> Situation:
    return Situation(
        id=sid,
        workspace=WEB,
        task=task,
        history=(("glob", {"pat": "*"}, None),),
        demo=_bash(good),
        violation=_bash(bad),
        correction=f"This project uses pnpm (there is a pnpm-lock.yaml), not npm: run `{good}`.",
        names=names,
    )


def _check_pnpm(c: Judged) -> bool:
    cmd = str(c.arguments.get("cmd", "")).strip()
    return c.tool == "bash" and (cmd.split() or [""])[0] == "pnpm"


PACKAGE_MANAGER = Scenario(
    name="package_manager",
    title="pnpm, not npm",
    rule="This project uses pnpm: run pnpm commands, never npm.",
    tools=["bash"],
    max_tokens=20,
    check=_check_pnpm,
    check_doc="bash command starts with `pnpm`",
    train=[
        _pm_situation("pm-train-0", "Add lodash as a dependency.", "pnpm add lodash", "npm install lodash", ("lodash",)),
        _pm_situation("pm-train-1", "Install the project's dependencies.", "pnpm install", "npm install", ("install",)),
        _pm_situation("pm-train-2", "Run the test suite.", "pnpm test", "npm test", ("test",)),
        _pm_situation("pm-train-3", "Add zod to the dependencies.", "pnpm add zod", "npm install zod", ("zod",)),
        _pm_situation("pm-train-4", "Remove the react dependency.", "pnpm remove react", "npm uninstall react", ("react", "remove")),
        _pm_situation("pm-train-5", "Build the app for production.", "pnpm build", "npm run build", ("build",)),
        _pm_situation("pm-train-6", "Add typescript as a dev dependency.", "pnpm add -D typescript", "npm install --save-dev typescript", ("typescript",)),
        _pm_situation("pm-train-7", "Update react to its latest version.", "pnpm update react --latest", "npm update react", ("update",)),
    ],
    held_out=[
        _pm_situation("pm-held-0", "Run the linter over src.", "pnpm lint", "npm run lint", ("lint",)),
        _pm_situation("pm-held-1", "Start the dev server.", "pnpm dev", "npm run dev", ("dev",)),
        _pm_situation("pm-held-2", "Install vitest so we can write unit tests.", "pnpm add -D vitest", "npm install --save-dev vitest", ("vitest",)),
        _pm_situation("pm-held-3", "Check which packages are outdated.", "pnpm outdated", "npm outdated", ("outdated",)),
    ],
)  # fmt: skip


# -- 3. content style: logger, not print ------------------------------------------------------

_LOG_CORRECTIONS = [
    "Don't use print for this; log it with the module's logger (logger.info).",
    "No print() please. {path} has a logger: use logger.info.",
    "Use logger, not print: our services log through the logging module.",
    "print() output is lost in production; call logger.info instead.",
]


def _log_situation(
    sid: str,
    path: str,
    task: str,
    span: tuple[int, int],
    good: str,
    bad: str,
    names: tuple[str, ...],
) -> Situation:
    return Situation(
        id=sid,
        workspace=PY,
        task=task,
        history=(_read(path),),
        demo=_lines(PY, path, *span, good),
        violation=_lines(PY, path, *span, bad),
        correction=_correction(_LOG_CORRECTIONS, sid, path=path),
        names=names,
    )


def _check_logger(c: Judged) -> bool:
    text = str(c.arguments.get("content", c.arguments.get("new", "")))
    # "No print(" alone would pass an empty or unrelated edit; the rule is to log via logger.
    return c.tool in FILE_TOOLS and "print(" not in text and "logger." in text


LOGGING = Scenario(
    name="logging",
    title="log with logger, not print",
    rule="Log with the module's logger (logger.info, logger.warning), never with print().",
    tools=FILE_TOOLS,
    max_tokens=40,
    check=_check_logger,
    check_doc="written content contains `logger.` and no `print(`",
    train=[
        _log_situation(
            "log-train-0", "src/jobs/sync.py", "Log each account's id as sync_all() syncs it.", (8, 8),
            '        account.sync()\n        logger.info("synced account %s", account.id)',
            '        account.sync()\n        print(f"synced account {account.id}")', ("sync_all",),
        ),
        _log_situation(
            "log-train-1", "src/jobs/sync.py", "Log how many accounts sync_all() got, before the loop.", (7, 7),
            '    logger.info("syncing %d accounts", len(accounts))\n    for account in accounts:',
            '    print(f"syncing {len(accounts)} accounts")\n    for account in accounts:', ("accounts",),
        ),
        _log_situation(
            "log-train-2", "src/jobs/cleanup.py", "Log every path that remove_stale() deletes.", (8, 8),
            '        path.unlink()\n        logger.info("removed %s", path)',
            '        path.unlink()\n        print(f"removed {path}")', ("remove_stale",),
        ),
        _log_situation(
            "log-train-3", "src/jobs/cleanup.py", "Log a message when remove_stale() starts.", (7, 7),
            '    logger.info("removing stale files")\n    for path in paths:',
            '    print("removing stale files")\n    for path in paths:', ("paths",),
        ),
        _log_situation(
            "log-train-4", "src/api/users.py", "Log the new user's name in create_user().", (7, 7),
            '    logger.info("creating user %s", name)\n    return db.insert("users", name=name)',
            '    print(f"creating user {name}")\n    return db.insert("users", name=name)', ("create_user",),
        ),
        _log_situation(
            "log-train-5", "src/api/users.py", "Warn in the log when create_user() gets an empty name.", (7, 7),
            '    if not name:\n        logger.warning("empty user name")\n    return db.insert("users", name=name)',
            '    if not name:\n        print("warning: empty user name")\n    return db.insert("users", name=name)', ("name",),
        ),
        _log_situation(
            "log-train-6", "src/api/orders.py", "Log the order id when cancel_order() cancels it.", (7, 7),
            '    db.update("orders", order_id, status="cancelled")\n    logger.info("cancelled order %s", order_id)',
            '    db.update("orders", order_id, status="cancelled")\n    print(f"cancelled order {order_id}")', ("cancel_order",),
        ),
        _log_situation(
            "log-train-7", "src/api/orders.py", "Add a debug log line before the database update in cancel_order().", (7, 7),
            '    logger.debug("updating order %s", order_id)\n    db.update("orders", order_id, status="cancelled")',
            '    print(f"updating order {order_id}")\n    db.update("orders", order_id, status="cancelled")', ("order_id",),
        ),
    ],
    held_out=[
        _log_situation(
            "log-held-0", "src/mail/send.py", "Record the recipient before send_mail() sends the message.", (7, 7),
            '    logger.info("sending mail to %s", to)\n    client.send(to, body)',
            '    print(f"sending mail to {to}")\n    client.send(to, body)', ("send_mail",),
        ),
        _log_situation(
            "log-held-1", "src/cache/store.py", "Report which key evict() drops.", (7, 7),
            '    logger.info("evicting %s", key)\n    cache.pop(key, None)',
            '    print(f"evicting {key}")\n    cache.pop(key, None)', ("evict",),
        ),
        _log_situation(
            "log-held-2", "src/auth/login.py", "Note the user id when login() succeeds.", (7, 7),
            '    session["user"] = user.id\n    logger.info("user %s logged in", user.id)',
            '    session["user"] = user.id\n    print(f"user {user.id} logged in")', ("login",),
        ),
        _log_situation(
            "log-held-3", "src/billing/invoice.py", "Output the amount that issue_invoice() records.", (7, 7),
            '    logger.info("invoice of %s", amount)\n    ledger.append(amount)',
            '    print(f"invoice of {amount}")\n    ledger.append(amount)', ("issue_invoice",),
        ),
    ],
)  # fmt: skip


# -- 4. scope: never touch vendor/ ------------------------------------------------------------

_SCOPE_CORRECTIONS = [
    "Don't edit vendor/, it's third-party code we copy verbatim. Change {ours} instead.",
    "Leave {theirs} alone (vendored). Put the fix in our wrapper {ours}.",
    "Never modify files under vendor/; make the change in {ours}.",
    "vendor/ is off limits: fix it on our side, in {ours}.",
]


def _scope_situation(
    sid: str,
    ours: str,
    theirs: str,
    task: str,
    good: tuple[int, int, str],
    bad: tuple[int, int, str],
    names: tuple[str, ...],
) -> Situation:
    return Situation(
        id=sid,
        workspace=PY,
        task=task,
        # Our wrapper first, then the vendored file it calls: the agent followed the import,
        # so the vendored code is the last thing in view (where a copying model goes).
        history=(_read(ours), _read(theirs)),
        demo=_lines(PY, ours, *good),
        violation=_lines(PY, theirs, *bad),
        correction=_correction(_SCOPE_CORRECTIONS, sid, ours=ours, theirs=theirs),
        names=names,
    )


def _check_scope(c: Judged) -> bool:
    path = str(c.arguments.get("path", ""))
    return c.tool in FILE_TOOLS and bool(path) and not path.lstrip("./").startswith("vendor/")


_DATES, _DATEP = "src/app/dates.py", "vendor/dateparse/core.py"
_HTTP, _HTTPK = "src/app/http.py", "vendor/httpkit/client.py"
_IMP, _CSV = "src/app/imports.py", "vendor/csvfast/reader.py"
_TOK, _JWT = "src/app/tokens.py", "vendor/jwtmini/decode.py"

SCOPE = Scenario(
    name="scope",
    title="never edit vendor/",
    rule="Never edit files under vendor/; make the change in our own code under src/.",
    tools=FILE_TOOLS,
    max_tokens=16,
    check=_check_scope,
    check_doc="the changed path is not under vendor/",
    train=[
        _scope_situation(
            "scope-train-0", _DATES, _DATEP, "parse_date() crashes on an empty string; return None for it.",
            (4, 5, "def parse_date(text):\n    if not text:\n        return None\n    return parse(text)"),
            (1, 1, "def parse(text):\n    if not text:\n        return None"), ("parse_date",),
        ),
        _scope_situation(
            "scope-train-1", _DATES, _DATEP, "parse_date() should also accept dashes, like 01-02-2024.",
            (5, 5, '    return parse(text.replace("-", "/"))'),
            (2, 2, '    day, month, year = text.replace("-", "/").split("/")'), ("dashes",),
        ),
        _scope_situation(
            "scope-train-2", _DATES, _DATEP, "parse_date() should ignore surrounding spaces.",
            (5, 5, "    return parse(text.strip())"),
            (2, 2, '    day, month, year = text.strip().split("/")'), ("strip",),
        ),
        _scope_situation(
            "scope-train-3", _DATES, _DATEP, "parse_date() should raise ValueError for None.",
            (4, 5, 'def parse_date(text):\n    if text is None:\n        raise ValueError("no date")\n    return parse(text)'),
            (1, 1, 'def parse(text):\n    if text is None:\n        raise ValueError("no date")'), ("ValueError",),
        ),
        _scope_situation(
            "scope-train-4", _HTTP, _HTTPK, "Make fetch() time out after 10 seconds.",
            (5, 5, "    return get(url, timeout=10)"),
            (1, 1, "def get(url, timeout=10):"), ("fetch", "timeout"),
        ),
        _scope_situation(
            "scope-train-5", _HTTP, _HTTPK, "fetch() should refuse URLs that are not https.",
            (4, 5, 'def fetch(url):\n    if not url.startswith("https://"):\n        raise ValueError(url)\n    return get(url)'),
            (1, 1, 'def get(url, timeout=None):\n    if not url.startswith("https://"):\n        raise ValueError(url)'), ("https",),
        ),
        _scope_situation(
            "scope-train-6", _HTTP, _HTTPK, "fetch() should strip whitespace around the URL.",
            (5, 5, "    return get(url.strip())"),
            (2, 2, '    return _request("GET", url.strip(), timeout)'), ("url",),
        ),
        _scope_situation(
            "scope-train-7", _HTTP, _HTTPK, "fetch() should retry once on ConnectionError.",
            (4, 5, "def fetch(url):\n    try:\n        return get(url)\n    except ConnectionError:\n        return get(url)"),
            (2, 2, '    try:\n        return _request("GET", url, timeout)\n    except ConnectionError:\n        return _request("GET", url, timeout)'),
            ("ConnectionError",),
        ),
    ],
    held_out=[
        _scope_situation(
            "scope-held-0", _IMP, _CSV, "import_csv() breaks on blank lines; skip them.",
            (5, 5, '    return [row for row in rows(text) if row != [""]]'),
            (2, 2, '    return [line.split(",") for line in text.splitlines() if line]'), ("import_csv",),
        ),
        _scope_situation(
            "scope-held-1", _IMP, _CSV, "import_csv() must also read semicolon-separated files.",
            (5, 5, '    return rows(text.replace(";", ","))'),
            (2, 2, '    return [line.replace(";", ",").split(",") for line in text.splitlines()]'), ("semicolon",),
        ),
        _scope_situation(
            "scope-held-2", _TOK, _JWT, "user_claims() crashes on tokens without a signature; give None for those.",
            (4, 5, 'def user_claims(token):\n    if token.count(".") != 2:\n        return None\n    return claims(token)'),
            (2, 2, '    if token.count(".") != 2:\n        return None\n    header, body, signature = token.split(".")'), ("user_claims",),
        ),
        _scope_situation(
            "scope-held-3", _TOK, _JWT, "user_claims() should accept tokens with a 'Bearer ' prefix.",
            (5, 5, '    return claims(token.removeprefix("Bearer "))'),
            (2, 2, '    header, body, signature = token.removeprefix("Bearer ").split(".")'), ("Bearer",),
        ),
    ],
)  # fmt: skip


SCENARIOS: list[Scenario] = [TOOL_CHOICE, PACKAGE_MANAGER, LOGGING, SCOPE]


def scenario(name: str) -> Scenario:
    for s in SCENARIOS:
        if s.name == name:
            return s
    raise KeyError(f"unknown scenario {name!r}; known: {[s.name for s in SCENARIOS]}")


# -- judging ----------------------------------------------------------------------------------

_TOOL_RE = re.compile(r'"tool"\s*:\s*"(\w+)')
# A string argument, finished or cut off mid-string (the decode budget ran out).
_STR_ARG_RE = re.compile(r'"(\w+)"\s*:\s*"((?:[^"\\]|\\.)*)("?)')
_INT_ARG_RE = re.compile(r'"(\w+)"\s*:\s*(-?\d+)\s*[,}]')


def _unescape(body: str) -> str:
    body = body[:-1] if body.endswith("\\") and not body.endswith("\\\\") else body
    try:
        return str(json.loads(f'"{body}"'))
    except json.JSONDecodeError:
        return body


def judge_text(text: str, parse: Callable[[str], Any] | None = None) -> Judged:
    """The call in `text`: parsed whole when it is complete, else the fields written so far.

    `parse` is the renderer's `parse_call` (strict); a proposal cut at the token budget
    fails it and is read leniently: the tool name and every argument the model began.
    """
    if parse is not None:
        try:
            call = parse(text)
            return Judged(str(call.tool), dict(call.arguments), True)
        except ValueError:
            pass
    m = _TOOL_RE.search(text)
    tool = m.group(1) if m else None
    args: dict[str, Any] = {}
    start = text.find('"arguments"')
    body = text[start:] if start >= 0 else ""
    for key, value, _closed in _STR_ARG_RE.findall(body):
        if key != "arguments":
            args.setdefault(key, _unescape(value))
    for key, value in _INT_ARG_RE.findall(body):
        args.setdefault(key, int(value))
    return Judged(tool, args, False)


def judge_call(call: dict[str, Any]) -> Judged:
    return Judged(str(call["tool"]), dict(call["arguments"]), True)


def check_disjoint(scenarios: list[Scenario] | None = None) -> list[str]:
    """Problems that would let a held-out situation leak from training (empty = none).

    Across all scenarios: no held-out situation shares an id, a task text, a name or a
    file it changes with any training situation; held-out files are not even *shown* in
    a training situation of the same workspace.
    """
    scenarios = scenarios if scenarios is not None else SCENARIOS
    train = [s for sc in scenarios for s in sc.train]
    held = [s for sc in scenarios for s in sc.held_out]
    problems = []
    ids = {s.id for s in train}
    tasks = {s.task.strip().lower() for s in train}
    names = {n.lower() for s in train for n in s.names}
    shown = {(s.workspace, p) for s in train for p in s.paths()}
    for h in held:
        if h.id in ids:
            problems.append(f"{h.id}: id also used for training")
        if h.task.strip().lower() in tasks:
            problems.append(f"{h.id}: task text also used for training")
        if {n.lower() for n in h.names} & names:
            problems.append(f"{h.id}: names {sorted({n.lower() for n in h.names} & names)} trained")
        leaked = {(h.workspace, p) for p in h.paths()} & shown
        if leaked:
            problems.append(f"{h.id}: files {sorted(p for _, p in leaked)} seen in training")
    return problems
