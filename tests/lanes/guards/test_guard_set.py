from __future__ import annotations

import subprocess
import sys
import time

import pytest
from pydantic import ValidationError

from continual_lsp.lanes.compile import compile_guard
from continual_lsp.lanes.guards import patterns
from continual_lsp.lanes.guards.guard_set import Guard, GuardSet, check_guards
from continual_lsp.lanes.guards.spec import (
    CommandRule,
    ContentRule,
    GuardSpec,
    PathRule,
    PythonRule,
    SizeRule,
    ToolRule,
)
from continual_lsp.lanes.reading import Situation, read
from continual_lsp.tools.base import Preview, ToolCall


def bash(cmd: str) -> ToolCall:
    return ToolCall(tool="bash", arguments={"cmd": cmd})


def test_npm_to_pnpm_rewrite_from_text() -> None:
    spec = compile_guard(read("Use pnpm, never npm."))
    assert spec is not None
    guard = Guard("g1", spec)
    v = guard.check(bash("npm install lodash && npm run build"), None)
    assert v.action == "rewrite"
    assert v.rewritten_call is not None
    assert v.rewritten_call.arguments["cmd"] == "pnpm install lodash && pnpm run build"
    assert v.guard_id == "g1"
    # Already compliant, and words that merely contain "npm" are left alone.
    assert guard.check(bash("pnpm install"), None).action == "allow"
    assert guard.check(bash("echo npmrc"), None).action == "allow"


def test_the_command_after_a_colon_is_what_to_run_not_what_to_block() -> None:
    spec = compile_guard(read("This project uses pnpm, not npm: run `pnpm add lodash`."))
    assert spec is not None
    guard = Guard("g1", spec)
    # The example command is allowed, and npm becomes pnpm with its own subcommand.
    assert guard.check(bash("pnpm add lodash"), None).action == "allow"
    v = guard.check(bash("npm test"), None)
    assert v.action == "rewrite" and v.rewritten_call is not None
    assert v.rewritten_call.arguments["cmd"] == "pnpm test"


def test_command_deny_flag() -> None:
    spec = compile_guard(read("Use debug builds (not `--release`) when developing."))
    assert spec is not None
    guard = Guard("g", spec)
    assert guard.check(bash("cargo build --release"), None).action == "block"
    assert guard.check(bash("cargo build"), None).action == "allow"
    assert guard.check(ToolCall(tool="read", arguments={"path": "a"}), None).action == "allow"


def test_path_deny_vendor() -> None:
    spec = compile_guard(read("Never edit files under vendor/."))
    assert spec is not None
    guard = Guard("g", spec)
    write = ToolCall(tool="write", arguments={"path": "vendor/lib.py", "content": "x"})
    v = guard.check(write, None)
    assert v.action == "block" and "vendor" in v.message
    ok = ToolCall(tool="write", arguments={"path": "src/lib.py", "content": "x"})
    assert guard.check(ok, None).action == "allow"
    looks = ToolCall(tool="read", arguments={"path": "vendor/lib.py"})
    assert guard.check(looks, None).action == "allow"  # reading is fine
    assert guard.check(bash("rm -rf vendor/lib.py"), None).action == "block"


def test_content_regex_on_added_lines_only() -> None:
    spec = compile_guard(read("Use Timber for logging, never `println` or `Log.*`"))
    assert spec is not None
    guard = Guard("g", spec)
    bad = ToolCall(tool="edit", arguments={"path": "A.kt", "old": "x", "new": 'println("hi")'})
    assert guard.check(bad, None).action == "block"
    log_d = ToolCall(tool="write", arguments={"path": "A.kt", "content": 'Log.d("t", "m")'})
    assert guard.check(log_d, None).action == "block"
    # An edit that keeps an old println but adds a clean line is not blamed for it.
    preview = Preview(
        path="A.kt",
        old_content='println("old")\n',
        new_content='println("old")\nTimber.d("new")\n',
        diff='--- a/A.kt\n+++ b/A.kt\n@@ -1 +1,2 @@\n println("old")\n+Timber.d("new")\n',
        old_sha256=None,
    )
    call = ToolCall(tool="edit", arguments={"path": "A.kt", "old": "x", "new": "y"})
    assert guard.check(call, preview).action == "allow"


def test_size_tool_and_allow_rules() -> None:
    size = Guard("s", GuardSpec(message="Files stay under 3 lines.", rules=[SizeRule(max_lines=3)]))
    long = ToolCall(tool="write", arguments={"path": "a.py", "content": "1\n2\n3\n4\n"})
    assert size.check(long, None).action == "block"
    short = ToolCall(tool="write", arguments={"path": "a.py", "content": "1\n"})
    assert size.check(short, None).action == "allow"
    tool = Guard("t", GuardSpec(message="No bash.", rules=[ToolRule(deny=["bash"])]))
    assert tool.check(bash("ls"), None).action == "block"
    only = Guard("o", GuardSpec(message="Read only.", rules=[ToolRule(allow=["read", "grep"])]))
    assert only.check(short, None).action == "block"
    inside = Guard(
        "i", GuardSpec(message="Only src/.", rules=[PathRule(globs=["src/**"], mode="allow")])
    )
    assert inside.check(short, None).action == "block"
    ok = ToolCall(tool="write", arguments={"path": "src/a.py", "content": "1"})
    assert inside.check(ok, None).action == "allow"


def test_guardset_from_store_chains_and_blocks(store) -> None:
    rewrite = GuardSpec(
        message="pnpm", rules=[CommandRule(pattern=r"(^|\s)npm(?=\s)", replace=r"\1pnpm")]
    )
    deny = GuardSpec(message="no lodash", rules=[CommandRule(pattern=r"lodash")])
    store.add_lane_item(
        {"text": "pnpm", "lane": "CODE", "reason": "r", "spec": rewrite.model_dump()}
    )
    store.add_lane_item(
        {"text": "pending", "lane": "CODE", "reason": "r", "spec": {"pending": True}}
    )
    v = check_guards(store, bash("npm test"))
    assert v.action == "rewrite" and v.rewritten_call.arguments["cmd"] == "pnpm test"
    store.add_lane_item(
        {"text": "no lodash", "lane": "CODE", "reason": "r", "spec": deny.model_dump()}
    )
    v = check_guards(store, bash("npm i lodash"))
    assert v.action == "block" and v.message == "no lodash"
    content = GuardSpec(
        message="no print", rules=[ContentRule(pattern=r"\bprint\(", path_globs=["*.py"])]
    )
    store.add_lane_item(
        {"text": "no print", "lane": "CODE", "reason": "r", "spec": content.model_dump()}
    )
    w = ToolCall(tool="write", arguments={"path": "a.py", "content": "print(1)"})
    assert check_guards(store, w).action == "block"
    w_md = ToolCall(tool="write", arguments={"path": "a.md", "content": "print(1)"})
    assert check_guards(store, w_md).action == "allow"


def test_python_guard_runs_sandboxed_and_can_rewrite(store) -> None:
    code = (
        "def check(call, preview):\n"
        "    if call['tool'] == 'bash' and 'yarn' in call['arguments']['cmd']:\n"
        "        return {'action': 'rewrite', 'message': 'pnpm',\n"
        "                'arguments': {'cmd': call['arguments']['cmd'].replace('yarn', 'pnpm')}}\n"
        "    return None\n"
    )
    spec = GuardSpec(message="use pnpm", rules=[PythonRule(code=code)])
    guard = Guard("py", spec)
    v = guard.check(bash("yarn add x"), None)
    assert v.action == "rewrite" and v.rewritten_call.arguments["cmd"] == "pnpm add x"


def test_failing_python_guard_fails_open_then_is_disabled(store, caplog) -> None:
    spec = GuardSpec(
        message="broken", rules=[PythonRule(code="def check(call, preview):\n    1/0\n")]
    )
    item_id = store.add_lane_item(
        {"text": "broken", "lane": "CODE", "reason": "r", "spec": spec.model_dump()}
    )
    for _ in range(3):
        v = check_guards(store, bash("ls"))
        assert v.action == "allow"  # fail open: the reviewer still sees the proposal
    assert "failed open" in caplog.text
    assert store.lane_item(item_id)["active"] == 0
    assert store.counter(f"guard_failures:{item_id}") == 3


def test_an_invalid_pattern_is_refused_when_the_rule_is_built(store) -> None:
    with pytest.raises(ValidationError, match="invalid pattern"):
        CommandRule(pattern="(")
    # One stored anyway (by hand, or before the check) is skipped: the reviewer decides.
    rules = [{"kind": "command", "pattern": "("}]
    store.add_lane_item(
        {"text": "bad", "lane": "CODE", "reason": "t", "spec": {"message": "bad", "rules": rules}}
    )
    assert check_guards(store, bash("ls")).action == "allow"


CATASTROPHIC = """
import sys, time
from continual_lsp.lanes.compile import compile_guard
from continual_lsp.lanes.guards.guard_set import check_guards
from continual_lsp.lanes.reading import read
from continual_lsp.store.db import Store
from continual_lsp.tools.base import ToolCall

store = Store(sys.argv[1])
spec = compile_guard(read("Never use `a*a*a*a*a*a*a*a*a*a*a*a*c` in code"))
store.add_lane_item({"text": spec.message, "lane": "CODE", "reason": "t", "spec": spec.model_dump()})
content = "x = '" + "a" * 80 + "'\\n"
start = time.monotonic()
verdict = check_guards(store, ToolCall(tool="write", arguments={"path": "a.py", "content": content}))
print(verdict.action, time.monotonic() - start)
"""


def test_a_pattern_learned_from_a_correction_runs_in_linear_time(tmp_path) -> None:
    """Issue 32, finding 2: this correction became `\\ba\\w*a\\w*…c`; on Python's `re`
    the next proposal with 80 `a`s held the GIL for minutes (in a child process here, so
    the old engine fails the test by its timeout instead of hanging the suite)."""
    try:
        out = subprocess.run(
            [sys.executable, "-c", CATASTROPHIC, str(tmp_path / "store.sqlite3")],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.split()
    except subprocess.TimeoutExpired:
        pytest.fail("the guard check did not return in 60 s")
    assert out[0] == "allow" and float(out[1]) < 1.0


@pytest.mark.parametrize(
    ("pattern", "linear"),
    [(r"\ba\w*a\w*c", True), (r"\n\Z", True), (r"(?<!\S)--force(?![\w-])", False)],
)
def test_guard_patterns_run_on_re2_unless_they_need_lookaround(pattern: str, linear: bool) -> None:
    assert (patterns.compiled(pattern).linear is not None) == linear


def test_a_lookaround_pattern_runs_under_a_deadline(store) -> None:
    """RE2 cannot run lookaround (the project's own shapes use it): such a pattern runs on
    `regex` with a deadline; past it the proposal is blocked (never run unchecked) and the
    guard is not counted as failing (a crafted text must not disable it)."""
    slow = patterns.compiled(r"(?!x)(a|aa)+$")
    start = time.monotonic()
    with pytest.raises(patterns.PatternTimeout):
        slow.search("a" * 60 + "b")
    assert time.monotonic() - start < 1.0
    spec = GuardSpec(message="slow", rules=[ContentRule(pattern=r"(?!x)(a|aa)+$")])
    call = ToolCall(tool="write", arguments={"path": "a.py", "content": "a" * 60 + "b"})
    guards = GuardSet([Guard("slow", spec)], store=store)
    for _ in range(3):
        verdict = guards.check(call)
        assert verdict.action == "block" and "in time" in verdict.message
    assert store.counter("guard_failures:slow") == 0 and len(guards.guards) == 1


def test_a_denial_comment_uses_the_denied_call() -> None:
    # Alone, "use pnpm" names the package manager: the others are rewritten to it.
    alone = compile_guard(read("use pnpm"))
    assert alone is not None
    assert Guard("g", alone).check(bash("yarn add x"), None).rewritten_call == bash("pnpm add x")
    denied = Situation(tool="bash", arguments={"cmd": "npm install lodash"})
    spec = compile_guard(read("use pnpm"), denied)
    assert spec is not None
    v = Guard("g", spec).check(bash("npm install lodash"), None)
    assert v.action == "rewrite" and v.rewritten_call.arguments["cmd"] == "pnpm install lodash"
