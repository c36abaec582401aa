from __future__ import annotations

from continual_lsp.agent.conversation import KEEP_CALLS, RESULT_CHARS, Conversation
from continual_lsp.tools.base import ToolCall, ToolResult


def _call(i: int) -> ToolCall:
    return ToolCall(tool="read", arguments={"path": f"f{i}.py"})


def test_old_calls_are_summarised_and_results_clipped() -> None:
    conv = Conversation("do it")
    for i in range(KEEP_CALLS + 3):
        conv.add_call(_call(i), ToolResult(ok=True, output="x" * (RESULT_CHARS + 50)))
    msgs = conv.messages()
    assert "3 earlier calls omitted" in msgs[1].content and "f0.py" in msgs[1].content
    assert sum(m.role == "assistant" for m in msgs) == KEEP_CALLS
    tool_outputs = [m.content for m in msgs if m.role == "tool"]
    assert all("50 chars cut" in t for t in tool_outputs)
    # A tighter budget keeps fewer calls and says so.
    assert sum(m.role == "assistant" for m in conv.messages(keep=1)) == 1
    assert f"{KEEP_CALLS + 2} earlier calls omitted" in conv.messages(keep=1)[1].content


def test_feedback_is_shown_until_a_call_runs_and_never_the_denied_call() -> None:
    conv = Conversation("fix mean")
    conv.add_feedback("use edit_lines")
    last = conv.messages()[-1]
    assert last.role == "user" and "use edit_lines" in last.content
    conv.add_call(_call(1), ToolResult(ok=True, output="ok"))
    assert all("use edit_lines" not in m.content for m in conv.messages())


def test_bullets_and_notes_are_in_the_first_turn() -> None:
    conv = Conversation("fix mean")
    conv.add_note("tests live in tests/")
    first = conv.messages(["use pnpm"])[0].content
    assert "use pnpm" in first and "tests live in tests/" in first and "fix mean" in first


def test_long_notes_are_capped_and_the_oldest_summarised() -> None:
    """Issue 15: two 9.8k-character notes made every later turn too long for the model."""
    from continual_lsp.agent.conversation import NOTE_CHARS, NOTES_CHARS

    conv = Conversation("fix the build")
    conv.add_note("A" * 9800)
    conv.add_note("B" * 9800)
    conv.add_note("use pnpm, not npm")
    prompt = "\n".join(m.content for m in conv.messages())
    assert len(prompt) < NOTES_CHARS + 500
    assert "use pnpm, not npm" in prompt  # the newest note is always whole
    assert "B" * NOTE_CHARS in prompt and "B" * (NOTE_CHARS + 1) not in prompt
    assert "1 earlier note" in prompt  # the oldest is summarised, not silently dropped


def test_fewer_calls_than_keep_are_all_shown() -> None:
    """Four calls with room for six: all four in full (a negative cut once kept only the
    last two, so the rerun after a fix lost the failing run that motivated it)."""
    conv = Conversation("fix it")
    for i in range(4):
        conv.add_call(_call(i), ToolResult(ok=True, output=f"out {i}"))
    msgs = conv.messages()
    assert sum(m.role == "assistant" for m in msgs) == 4
    assert not any("omitted" in m.content for m in msgs)
    assert [m.content for m in msgs if m.role == "tool"] == [f"out {i}" for i in range(4)]


def test_a_long_failing_run_keeps_its_failure_lines_and_exit_code() -> None:
    noise = [f"    at frame{i} (node:internal/mod{i}:{i}:1)" for i in range(80)]
    output = "\n".join(
        [
            "TAP version 13",
            "not ok 1 - total_of",
            "  error: 'reslt is not defined'",
            *noise,
            "    at total_of (/ws/lib/calc.js:3:3)",
            *noise,
            "# pass 0",
            "# fail 1",
        ]
    )
    assert len(output) > RESULT_CHARS
    conv = Conversation("fix it")
    conv.add_call(_call(0), ToolResult(ok=False, output=output, exit_code=1))
    shown = next(m.content for m in conv.messages() if m.role == "tool")
    assert len(shown) <= RESULT_CHARS + 200
    assert shown.startswith("(exit code 1)\n")
    for line in ("not ok 1 - total_of", "reslt is not defined", "lib/calc.js:3:3", "# fail 1"):
        assert line in shown
    assert "lines cut)" in shown


def test_a_short_result_is_shown_as_it_is() -> None:
    conv = Conversation("fix it")
    conv.add_call(_call(0), ToolResult(ok=True, output="1 passed in 0.01s", exit_code=0))
    assert [m.content for m in conv.messages() if m.role == "tool"] == ["1 passed in 0.01s"]
