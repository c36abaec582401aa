from __future__ import annotations

from continual_lsp.agent.conversation import KEEP_CALLS, RESULT_CHARS, Conversation, steady
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
    conv.add_call(_call(0), ToolResult(ok=True, output="1 passed, 1 warning", exit_code=0))
    assert [m.content for m in conv.messages() if m.role == "tool"] == ["1 passed, 1 warning"]


def test_test_runners_timings_are_not_shown() -> None:
    """Two runs of the same failing test print other durations; the model sees neither."""
    pytest_run = "F.\nFAILED tests/test_x.py::test_a - assert 1 == 2\n1 failed, 1 passed in 0.05s"
    node_tap = (
        "not ok 1 - knot_speed\n  ---\n  duration_ms: 2.229866\n  location: '/ws/t.js:5:1'\n"
        "  ...\n# tests 1\n# duration_ms 61.5372\n"
    )
    node_spec = "✖ subs (0.5ms)\nℹ duration_ms 55.2\nℹ fail 1"
    assert steady(pytest_run).endswith("1 failed, 1 passed")
    assert steady("== 3 passed in 61.23s (0:01:01) ==") == "== 3 passed =="
    assert steady("\nno tests ran in 0.57s\n") == "\nno tests ran\n"
    assert steady("Ran 3 tests in 0.001s\n\nOK") == "Ran 3 tests\n\nOK"
    assert steady(node_tap) == (
        "not ok 1 - knot_speed\n  ---\n  location: '/ws/t.js:5:1'\n  ...\n# tests 1\n"
    )
    assert steady(node_spec) == "✖ subs\nℹ fail 1"
    # Only a runner's timing: words about time elsewhere stay.
    assert steady("sleep 5 took in 5s of waiting") == "sleep 5 took in 5s of waiting"
    conv = Conversation("Fix the test")
    conv.add_call(
        ToolCall(tool="bash", arguments={"cmd": "pytest -q"}),
        ToolResult(ok=False, output=pytest_run, exit_code=1),
    )
    shown = conv.messages()[-1].content
    assert "1 failed, 1 passed" in shown and "0.05s" not in shown
