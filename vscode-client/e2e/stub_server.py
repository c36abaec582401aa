"""A stand-in for `continual-lsp serve` that speaks DESIGN §7 with canned behaviour.

Only for the extension's end-to-end test (E2E_SERVER=stub): it exercises every UI path in
seconds with no model and no dependency on the server's internals. The real scenario runs
the real server (E2E_SERVER=model, the default).

    python vscode-client/e2e/stub_server.py     (stdio; needs pygls, as in the project venv)

Script: startTask → a `write` that rewrites src/calc/ops.py (to deny); deny → learned +
routed notifications, then an `edit_lines` retry that fixes the bug; approve → written to
disk, then taskDone.
"""

from __future__ import annotations

import asyncio
import difflib
import time
from pathlib import Path
from typing import Any

from pygls.lsp.server import LanguageServer

server = LanguageServer("continual-stub", "0.1")
state: dict[str, Any] = {
    "root": Path.cwd(),
    "proposals": {},
    "ledger": [],
    "steps": 0,
    "adapter": None,
    "pending": None,
}

OPS = "src/calc/ops.py"


def plain(value: Any) -> Any:
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def split(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def diff(rel: str, old: str, new: str) -> str:
    out = []
    for line in difflib.unified_diff(split(old), split(new), f"a/{rel}", f"b/{rel}"):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def apply(tool: str, args: dict[str, Any], old: str) -> str:
    if tool == "write":
        return args["content"]
    if tool == "edit":
        return old.replace(args["old"], args["new"], 1)
    lines = split(old)
    content = args["content"]
    if content and not content.endswith("\n"):
        content += "\n"
    return "".join(lines[: args["start"] - 1]) + content + "".join(lines[args["end"] :])


def propose(task_id: str, pid: str, tool: str, args: dict[str, Any]) -> None:
    path = state["root"] / args["path"]
    old = path.read_text() if path.exists() else ""
    new = apply(tool, args, old)
    changed = [i for i, (a, b) in enumerate(zip(split(old), split(new), strict=False)) if a != b]
    first = changed[0] if changed else 0
    state["proposals"][pid] = {"taskId": task_id, "tool": tool, "arguments": args}
    state["pending"] = pid
    server.protocol.notify(
        "continual/proposal",
        {
            "proposalId": pid,
            "taskId": task_id,
            "tool": tool,
            "arguments": args,
            "readOnly": False,
            "uri": path.resolve().as_uri(),
            "range": {
                "start": {"line": first, "character": 0},
                "end": {"line": first, "character": 0},
            },
            "diff": diff(args["path"], old, new),
        },
    )


def later(fn: Any, *args: Any) -> None:
    asyncio.get_event_loop().call_later(0.3, fn, *args)


@server.feature("initialize")
def initialize(ls: LanguageServer, params: Any) -> None:
    folders = getattr(params, "workspace_folders", None)
    if folders:
        state["root"] = Path(folders[0].uri.removeprefix("file://"))


@server.feature("continual/startTask")
def start_task(ls: LanguageServer, params: Any) -> dict[str, Any]:
    ops = (state["root"] / OPS).read_text()
    rewrite = ops.replace("// len(values)", "/ len(values)").replace(
        "    # BUG: integer division truncates the mean\n", ""
    )
    later(propose, "t1", "p1", "write", {"path": OPS, "content": rewrite})
    return {"taskId": "t1"}


@server.feature("continual/decide")
def decide(ls: LanguageServer, params: Any) -> dict[str, Any]:
    p = plain(params)
    pid, decision = p["proposalId"], p["decision"]
    proposal = state["proposals"].pop(pid, None)
    if proposal is None:
        return {"ok": False}
    state["pending"] = None
    if decision == "deny":
        state["steps"] += 1
        state["adapter"] = f"v{state['steps']}"
        learned = {"step": state["steps"], "loss": 0.4213, "seconds": 1.7}
        item = {
            "id": f"i{len(state['ledger']) + 1}",
            "text": p.get("correction") or "",
            "lane": "CONTEXT",
            "reason": "behavioural; first occurrence → context bullet",
            "recurrence": 1,
            "createdAt": time.time(),
            "active": True,
        }
        state["ledger"].append(item)
        ls.protocol.notify(
            "continual/learned", {"proposalId": pid, "adapterVersion": state["adapter"], **learned}
        )
        ls.protocol.notify(
            "continual/routed", {"itemId": item["id"], "lane": "CONTEXT", "reason": item["reason"]}
        )
        args = {
            "path": OPS,
            "start": 7,
            "end": 7,
            "content": "    return sum(values) / len(values)",
        }
        later(propose, proposal["taskId"], "p2", "edit_lines", args)
        return {"ok": True, "learned": learned, "nextProposalId": "p2"}
    tool, args = proposal["tool"], proposal["arguments"]
    if decision == "edit":
        edited = dict(p.get("editedArguments") or {})
        tool = edited.pop("tool", tool)
        args = edited
    path = state["root"] / args["path"]
    old = path.read_text() if path.exists() else ""
    path.write_text(apply(tool, args, old))
    later(
        ls.protocol.notify,
        "continual/taskDone",
        {"taskId": proposal["taskId"], "summary": "mean() fixed."},
    )
    return {"ok": True}


@server.feature("continual/ledger")
def ledger(ls: LanguageServer, params: Any) -> dict[str, Any]:
    active = [i for i in state["ledger"] if i["active"]]
    return {
        "items": state["ledger"],
        "contextTokens": 9 * len(active),
        "notesOnlyTokens": 24 * len(state["ledger"]),
    }


@server.feature("continual/revert")
def revert(ls: LanguageServer, params: Any) -> dict[str, Any]:
    item_id = plain(params)["itemId"]
    for item in state["ledger"]:
        if item["id"] == item_id:
            item["active"] = False
    return {"ok": True}


@server.feature("continual/note")
def note(ls: LanguageServer, params: Any) -> dict[str, Any]:
    return {"ok": True}


@server.feature("continual/status")
def status(ls: LanguageServer, params: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "backend": "stub",
        "model": "stub",
        "trainingSteps": state["steps"],
        "queueDepth": 0,
    }
    if state["adapter"]:
        out["adapterVersion"] = state["adapter"]
    if state["pending"]:
        out["pendingProposalId"] = state["pending"]
    return out


if __name__ == "__main__":
    server.start_io()
