"""Renderer: prompt layout, canonical call text, and the render_call → parse_call round trip.

These tests need only the embedded model's tokenizer, never its weights.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from continual_lsp.policy.base import Message, Renderer
from continual_lsp.policy.render import (
    TOOL_RESULT_PREFIX,
    ChatMLRenderer,
    call_text,
    canonical_arguments,
    compact_schema,
    default_system_prompt,
    format_result,
)
from continual_lsp.tools.base import TOOL_NAMES, ToolCall, ToolResult, tool_schema


@functools.cache
def load_tokenizer() -> Any:
    """The embedded model's tokenizer alone (fast from the safetensors cache)."""
    from continual_lsp.config import EMBEDDED_MODEL
    from continual_lsp.policy.model_files import load_tokenizer as load_local_tokenizer

    return load_local_tokenizer(EMBEDDED_MODEL)


@pytest.fixture(scope="module")
def renderer() -> ChatMLRenderer:
    return ChatMLRenderer(load_tokenizer())


# Any character but lone surrogates (not UTF-8) and unassigned code points: the tokenizer
# has no byte tokens for the lead bytes of the unassigned planes 4-11 (see render_call).
WRITABLE = st.characters(exclude_categories=("Cs", "Cn"))


def _value(prop: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A strategy for one property of a tool's argument schema, bounds respected."""
    if "anyOf" in prop:
        return st.one_of([_value(branch) for branch in prop["anyOf"]])
    kind = prop.get("type")
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return st.integers(prop.get("minimum", -(2**31)), prop.get("maximum", 2**31))
    assert kind == "string", prop
    # Short strings keep the test fast; the max-length case is covered separately.
    text = st.text(
        alphabet=WRITABLE,
        min_size=prop.get("minLength", 0),
        max_size=min(prop.get("maxLength", 40), 40),
    )
    if "pattern" in prop:
        return text.filter(re.compile(prop["pattern"]).fullmatch)
    return text


@st.composite
def tool_calls(draw: st.DrawFn, tool: str | None = None) -> ToolCall:
    name = tool or draw(st.sampled_from(TOOL_NAMES))
    schema = tool_schema(name)
    required = set(schema.get("required", []))
    arguments: dict[str, Any] = {}
    for key, prop in schema["properties"].items():
        if key in required or draw(st.booleans()):
            arguments[key] = draw(_value(prop))
    return ToolCall(tool=name, arguments=arguments)


def test_renderer_satisfies_protocol(renderer: ChatMLRenderer) -> None:
    assert isinstance(renderer, Renderer)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call=tool_calls())
def test_render_call_round_trips(renderer: ChatMLRenderer, call: ToolCall) -> None:
    tokens = renderer.render_call(call)
    assert tokens[-1] == renderer.end_of_turn_id
    parsed = renderer.parse_call(renderer.decode(tokens))
    assert parsed.tool == call.tool
    # Canonical form: validated, optional keys that were None are left out.
    assert parsed.arguments == canonical_arguments(call.tool, call.arguments)
    assert parsed.arguments == {k: v for k, v in call.arguments.items() if v is not None}
    # Rendering the parsed call again gives the very same tokens.
    assert renderer.render_call(parsed) == tokens


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_round_trip_every_tool_at_max_lengths(renderer: ChatMLRenderer, tool: str) -> None:
    schema = tool_schema(tool)
    arguments: dict[str, Any] = {}
    for key, prop in schema["properties"].items():
        branch = next((b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"), prop)
        if branch["type"] == "string":
            # Quotes, backslashes, newlines, DEL and non-ASCII: everything JSON escapes
            # (no newline or tab where the schema keeps the string on one line).
            fill = 'a"\\\n\t\x7fé😀' if "pattern" not in branch else 'a"\\\x7fé😀'
            arguments[key] = (fill * 1000)[: branch.get("maxLength", 50)]
            assert re.fullmatch(branch.get("pattern", "^.*$"), arguments[key], re.S)
        elif branch["type"] == "integer":
            arguments[key] = branch["maximum"]
        else:
            arguments[key] = True
    call = ToolCall(tool=tool, arguments=arguments)
    parsed = renderer.parse_call(renderer.decode(renderer.render_call(call)))
    assert parsed == call


def test_canonical_text_is_compact_and_in_schema_order() -> None:
    call = ToolCall(tool="read", arguments={"limit": 5, "path": "src/a.py", "offset": None})
    assert call_text(call) == '{"tool":"read","arguments":{"path":"src/a.py","limit":5}}'
    assert call_text(ToolCall(tool="write", arguments={"path": "é", "content": "x\x7f"})) == (
        '{"tool":"write","arguments":{"path":"é","content":"x\\u007f"}}'
    )


def test_parse_is_lenient_about_framing_only(renderer: ChatMLRenderer) -> None:
    expected = ToolCall(tool="glob", arguments={"pat": "**/*.py"})
    for text in (
        '{"tool": "glob", "arguments": {"pat": "**/*.py"}}',
        '  {"tool":"glob","arguments":{"pat":"**/*.py","path":null}}\n',
        '{"tool":"glob","arguments":{"pat":"**/*.py"}}<|im_end|>',
        '```json\n{"tool":"glob","arguments":{"pat":"**/*.py"}}\n```',
    ):
        assert renderer.parse_call(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("   <|im_end|>", "empty"),
        ("read the file", "not valid JSON"),
        ('{"tool":"read","arguments":{"path":"a"', "not valid JSON"),
        ('{"tool":"read","arguments":{"path":"a"}} {"tool":"glob"}', "exactly one tool call"),
        ('{"tool":"read","arguments":{"path":"a"}} and then', "exactly one tool call"),
        ('[{"tool":"read"}]', "must be a JSON object"),
        ('{"tool":"read"}', 'exactly the keys "tool" and "arguments"'),
        ('{"tool":"read","arguments":{},"why":"x"}', 'exactly the keys "tool" and "arguments"'),
        ('{"tool":"delete","arguments":{"path":"a"}}', "unknown tool 'delete'"),
        ('{"tool":"read","arguments":"a.py"}', '"arguments" of read must be a JSON object'),
        ('{"tool":"read","arguments":{}}', "invalid arguments for read: path: Field required"),
        ('{"tool":"read","arguments":{"path":""}}', "invalid arguments for read: path"),
        ('{"tool":"read","arguments":{"path":"a","mode":"r"}}', "mode: Extra inputs"),
        ('{"tool":"edit_lines","arguments":{"path":"a","start":0,"end":1,"content":""}}', "start"),
        ('{"tool":"bash","arguments":{"cmd":"' + "x" * 1001 + '"}}', "cmd: String should have"),
    ],
)
def test_parse_errors_are_clear_value_errors(
    renderer: ChatMLRenderer, text: str, message: str
) -> None:
    with pytest.raises(ValueError, match=None) as info:
        renderer.parse_call(text)
    assert message in str(info.value)


def test_render_call_rejects_invalid_arguments(renderer: ChatMLRenderer) -> None:
    with pytest.raises(ValueError, match="path"):
        renderer.render_call(ToolCall(tool="read", arguments={"path": ""}))
    with pytest.raises(ValueError, match="cannot write"):
        renderer.render_call(ToolCall(tool="read", arguments={"path": "\U00040000"}))


def test_prompt_layout(renderer: ChatMLRenderer) -> None:
    call = ToolCall(tool="read", arguments={"path": "src/calc/ops.py"})
    messages = [
        Message(role="system", content="Rule: never touch vendor/."),
        Message(role="user", content="Task: fix the failing test"),
        *renderer.turn_messages(call, ToolResult(ok=True, output="1\tdef add(a, b):")),
    ]
    text = renderer.decode(renderer.render_prompt(messages))
    assert text.startswith("<|im_start|>system\n" + renderer.system_prompt)
    assert text.endswith("<|im_start|>assistant\n")
    assert text.count("<|im_start|>system") == 1  # caller system text joins ours
    assert "Rule: never touch vendor/." in text
    assert "<|im_start|>assistant\n" + call_text(call) + "<|im_end|>" in text
    assert "<|im_start|>user\n" + TOOL_RESULT_PREFIX + "1\tdef add(a, b):" in text
    assert "<|im_start|>tool" not in text
    for name in TOOL_NAMES:
        assert f"- {name} {compact_schema(name)}" in text


def test_system_prompt_is_short(renderer: ChatMLRenderer) -> None:
    # Prefill costs ~2 ms a token on CPU and is paid on every turn.
    tokens = renderer.render_prompt([Message(role="user", content="Task: list the files")])
    assert len(tokens) < 320
    assert compact_schema("read") == '{"path": string, "offset"?: integer, "limit"?: integer}'


def test_format_result_marks_failures() -> None:
    assert format_result(ToolResult(ok=True, output="fine")) == "fine"
    assert format_result(ToolResult(ok=True, output="")) == "(no output)"
    failed = format_result(ToolResult(ok=False, output="boom", exit_code=2, truncated=True))
    assert failed == "(failed, exit code 2; output truncated)\nboom"
    assert format_result(ToolResult(ok=False, output="no such file")).startswith("(error)")


def test_call_text_is_valid_json_for_the_agent() -> None:
    call = ToolCall(tool="edit", arguments={"path": "a.py", "old": "x", "new": "y", "all": False})
    assert json.loads(call_text(call)) == {"tool": "edit", "arguments": call.arguments}


def test_allowed_tools_narrow_the_system_prompt() -> None:
    prompt = default_system_prompt(["grep", "read"])
    assert "- read {" in prompt
    assert "- grep {" in prompt
    assert "- bash {" not in prompt
    with pytest.raises(ValueError, match="unknown tools"):
        ChatMLRenderer(load_tokenizer(), tools=["read", "rm"])
