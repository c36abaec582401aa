"""The tool-call grammar: its schema, what it accepts, and that it agrees with the renderer.

Tokenizer only; decoding with the real model is in test_local_sampling.py.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from continual_lsp.policy.base import DecodeRestrictions
from continual_lsp.policy.call_schema import check_tools, decoding_schema, not_prefixed_regex
from continual_lsp.policy.local.grammar import ToolCallGrammar, allowed_mask
from continual_lsp.policy.render import ChatMLRenderer, call_text
from continual_lsp.tools.base import TOOL_NAMES, ToolCall, WriteArgs
from tests.policy.test_render import load_tokenizer, tool_calls


@pytest.fixture(scope="module")
def grammar() -> ToolCallGrammar:
    return ToolCallGrammar(load_tokenizer())


@pytest.fixture(scope="module")
def renderer() -> ChatMLRenderer:
    return ChatMLRenderer(load_tokenizer())


def _tokens(grammar: ToolCallGrammar, text: str) -> list[int]:
    return [*grammar.tokenizer.encode(text, add_special_tokens=False), *grammar.eos_tokens[:1]]


def test_decoding_schema_has_no_nulls_or_docs() -> None:
    text = json.dumps(decoding_schema())
    assert '"null"' not in text
    assert '"title"' not in text
    assert '"description"' not in text
    branches = decoding_schema()["oneOf"]
    assert [b["properties"]["tool"]["const"] for b in branches] == list(TOOL_NAMES)
    read_args = branches[0]["properties"]["arguments"]
    assert read_args["properties"]["offset"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 1000000,
    }
    assert read_args["additionalProperties"] is False


def test_grammar_forces_the_opening(grammar: ToolCallGrammar) -> None:
    matcher = grammar.matcher()
    assert matcher.compute_ff_bytes() == b'{"tool":"'
    matcher.consume_tokens(grammar.tokenizer.encode('{"tool":"read', add_special_tokens=False))
    # After the tool name, the key `arguments` and the first required key are forced too.
    assert matcher.compute_ff_bytes() == b'","arguments":{"path":"'


def test_mask_allows_exactly_the_tool_names(grammar: ToolCallGrammar) -> None:
    matcher = grammar.matcher()
    matcher.consume_tokens(matcher.compute_ff_tokens())
    mask = allowed_mask(matcher, grammar.vocab_size)
    allowed = {grammar.tokenizer.decode([int(i)]) for i in mask.nonzero()[:, 0]}
    assert allowed
    assert all(any(name.startswith(piece) for name in TOOL_NAMES) for piece in allowed)
    assert not mask[grammar.eos_tokens[0]]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call=tool_calls())
def test_grammar_accepts_every_rendered_call(
    grammar: ToolCallGrammar, renderer: ChatMLRenderer, call: ToolCall
) -> None:
    # The demonstration tokens used in training are a completion the sampler could write.
    assert grammar.accepts(renderer.render_call(call))


@pytest.mark.parametrize(
    "text",
    [
        '{"tool": "read", "arguments": {"path": "a"}}',  # whitespace
        '{"tool":"read","arguments":{"path":"a","offset":null}}',  # null for optional
        '{"tool":"read","arguments":{"limit":1,"path":"a"}}',  # keys out of schema order
        '{"arguments":{"path":"a"},"tool":"read"}',  # arguments before tool
        '{"tool":"read","arguments":{"path":""}}',  # minLength
        '{"tool":"read","arguments":{"path":"a","offset":0}}',  # minimum
        '{"tool":"read","arguments":{"path":"a","mode":"r"}}',  # extra key
        '{"tool":"remove","arguments":{"path":"a"}}',  # unknown tool
        '{"tool":"glob","arguments":{"pat":"' + "x" * 201 + '"}}',  # maxLength
        '{"tool":"read","arguments":{"path":"a"}}\n',  # text after the call
    ],
)
def test_grammar_rejects_non_canonical_or_invalid_calls(
    grammar: ToolCallGrammar, text: str
) -> None:
    tokens = _tokens(grammar, text)
    assert grammar.accepted_prefix(tokens) < len(tokens)
    assert not grammar.accepts(tokens)


def test_grammar_requires_end_of_turn(grammar: ToolCallGrammar) -> None:
    text = call_text(ToolCall(tool="bash", arguments={"cmd": "pytest -q"}))
    body = grammar.tokenizer.encode(text, add_special_tokens=False)
    assert grammar.accepted_prefix(body) == len(body)
    assert not grammar.accepts(body)  # complete JSON, but the turn has not ended
    assert grammar.accepts([*body, grammar.eos_tokens[0]])


def test_strings_at_max_length_are_accepted(grammar: ToolCallGrammar) -> None:
    for tool, arguments in [
        ("glob", {"pat": "é" * 200}),
        ("bash", {"cmd": "x" * 1000, "timeout": 600}),
        ("edit", {"path": "a", "old": '"' * 2000, "new": "", "all": False}),
    ]:
        text = call_text(ToolCall(tool=tool, arguments=arguments))
        assert grammar.accepts(_tokens(grammar, text)), tool


def test_bad_schema_is_reported() -> None:
    with pytest.raises(ValueError, match="does not compile"):
        ToolCallGrammar(load_tokenizer(), schema={"type": "object", "properties": 5})


def test_allowed_tools_restrict_the_grammar(grammar: ToolCallGrammar) -> None:
    schema = decoding_schema(["grep", "read"])
    assert [b["properties"]["tool"]["const"] for b in schema["oneOf"]] == ["read", "grep"]
    narrow = ToolCallGrammar(grammar.tokenizer, schema, ll_tokenizer=grammar.ll_tokenizer)
    read = call_text(ToolCall(tool="read", arguments={"path": "a"}))
    bash = call_text(ToolCall(tool="bash", arguments={"cmd": "ls"}))
    assert narrow.accepts(_tokens(grammar, read))
    assert not narrow.accepts(_tokens(grammar, bash))
    assert grammar.accepts(_tokens(grammar, bash))
    assert check_tools(None) == TOOL_NAMES
    with pytest.raises(ValueError, match="unknown tools"):
        check_tools(["read", "rm"])
    with pytest.raises(ValueError, match="empty"):
        check_tools([])


def test_guard_restrictions_narrow_the_grammar() -> None:
    """A blocked tool is not in the grammar; a forbidden path / command prefix cannot be
    written, while its near misses (another dir, `pnpm`) still can."""
    forbid = DecodeRestrictions(
        path_prefixes={"write": [""], "edit_lines": ["vendor/"]},
        command_prefixes=["npm ", "git push "],
    )
    blocked = [
        '{"tool":"write","arguments":{"path":"a.txt","content":"x"}}',
        '{"tool":"edit_lines","arguments":{"path":"vendor/x.py","start":1,"end":1,"content":"y"}}',
        '{"tool":"bash","arguments":{"cmd":"npm install lodash"}}',
        '{"tool":"bash","arguments":{"cmd":"git push origin main"}}',
    ]
    allowed = [
        '{"tool":"edit_lines","arguments":{"path":"src/vendor.py","start":1,"end":1,"content":"y"}}',
        '{"tool":"bash","arguments":{"cmd":"pnpm install lodash"}}',
        '{"tool":"bash","arguments":{"cmd":"git pull"}}',
    ]
    _assert_narrowed(forbid, blocked, allowed)


def _assert_narrowed(forbid: DecodeRestrictions, blocked: list[str], allowed: list[str]) -> None:
    """The grammar under `forbid` refuses every `blocked` call and accepts every `allowed`."""
    narrowed = ToolCallGrammar(
        load_tokenizer(),
        decoding_schema(None, forbid),
        ll_tokenizer=ToolCallGrammar(load_tokenizer()).ll_tokenizer,
    )
    for text in blocked:
        assert not narrowed.accepts(_tokens(narrowed, text)), text
    for text in allowed:
        assert narrowed.accepts(_tokens(narrowed, text)), text


def test_a_restriction_blocking_every_tool_keeps_the_tools() -> None:
    """The guards still block what is sampled; the grammar never becomes empty."""
    forbid = DecodeRestrictions(path_prefixes={tool: [""] for tool in TOOL_NAMES})
    branches = decoding_schema(["bash"], forbid)["oneOf"]
    assert [b["properties"]["tool"]["const"] for b in branches] == ["bash"]


def test_a_file_list_names_the_paths_to_read_or_edit() -> None:
    """With the workspace's files, read / edit / edit_lines name one of them (a blocked
    prefix still applies); write, glob and grep still take any path; a tool with no file
    left to name is not in the grammar."""
    forbid = DecodeRestrictions(
        path_prefixes={"edit": ["vendor/"]}, files=["svc/glacier.py", "vendor/x.py"]
    )
    blocked = [
        '{"tool":"read","arguments":{"path":"lib/glacier.py"}}',
        '{"tool":"read","arguments":{"path":"svc/glacier.p"}}',
        '{"tool":"edit","arguments":{"path":"vendor/x.py","old":"a","new":"b"}}',
        '{"tool":"edit_lines","arguments":{"path":"svc/x.py","start":1,"end":1,"content":"y"}}',
    ]
    allowed = [
        '{"tool":"read","arguments":{"path":"svc/glacier.py"}}',
        '{"tool":"read","arguments":{"path":"vendor/x.py"}}',
        '{"tool":"edit","arguments":{"path":"svc/glacier.py","old":"a","new":"b"}}',
        '{"tool":"write","arguments":{"path":"lib/new.py","content":"x"}}',
        '{"tool":"grep","arguments":{"pat":"x","path":"lib"}}',
    ]
    _assert_narrowed(forbid, blocked, allowed)
    only_vendor = DecodeRestrictions(path_prefixes={"edit": ["vendor/"]}, files=["vendor/x.py"])
    tools = [b["properties"]["tool"]["const"] for b in decoding_schema(None, only_vendor)["oneOf"]]
    assert "edit" not in tools and "read" in tools
    empty = [
        b["properties"]["tool"]["const"]
        for b in decoding_schema(None, DecodeRestrictions(files=[]))["oneOf"]
    ]
    assert empty == ["write", "glob", "grep", "bash", "done"]


def test_write_paths_name_where_a_write_goes() -> None:
    """A retry's probe of the path a correction names: write names one of the listed
    paths, or a file under a listed folder (a blocked prefix still applies); the other
    tools are as they were."""
    forbid = DecodeRestrictions(
        path_prefixes={"write": ["vendor/"]}, write_paths=["src/pkg/units.py", "vendor/u.py"]
    )
    blocked = [
        '{"tool":"write","arguments":{"path":"units.py","content":"x"}}',
        '{"tool":"write","arguments":{"path":"src/pkg/units.pyc","content":"x"}}',
        '{"tool":"write","arguments":{"path":"vendor/u.py","content":"x"}}',
    ]
    allowed = [
        '{"tool":"write","arguments":{"path":"src/pkg/units.py","content":"def f():\\n"}}',
        '{"tool":"read","arguments":{"path":"units.py"}}',
        '{"tool":"edit","arguments":{"path":"lib/x.py","old":"a","new":"b"}}',
    ]
    _assert_narrowed(forbid, blocked, allowed)
    folder = DecodeRestrictions(write_paths=["src/pkg/", "setup.py"])
    blocked = [
        '{"tool":"write","arguments":{"path":"units.py","content":"x"}}',
        '{"tool":"write","arguments":{"path":"src/pkg/","content":"x"}}',
        '{"tool":"write","arguments":{"path":"src/pkg/*.py","content":"x"}}',
        '{"tool":"write","arguments":{"path":"src/units.py","content":"x"}}',
    ]
    allowed = [
        '{"tool":"write","arguments":{"path":"src/pkg/units.py","content":"x"}}',
        '{"tool":"write","arguments":{"path":"src/pkg/io/read.py","content":"x"}}',
        '{"tool":"write","arguments":{"path":"setup.py","content":"x"}}',
    ]
    _assert_narrowed(folder, blocked, allowed)
    none_left = DecodeRestrictions(path_prefixes={"write": ["src/"]}, write_paths=["src/a.py"])
    tools = [b["properties"]["tool"]["const"] for b in decoding_schema(None, none_left)["oneOf"]]
    assert "write" not in tools and "edit" in tools


def test_a_new_file_is_never_a_glob(grammar: ToolCallGrammar) -> None:
    """The glob the model just ran is not a file name: neither the grammar nor the tool
    takes `*` or `?` in a path to write."""
    assert not grammar.accepts(
        _tokens(grammar, '{"tool":"write","arguments":{"path":"app/*.py","content":"x"}}')
    )
    assert grammar.accepts(
        _tokens(grammar, '{"tool":"write","arguments":{"path":"app/a.py","content":"x"}}')
    )
    with pytest.raises(ValueError, match="glob pattern, not a file name"):
        WriteArgs(path="app/*.py", content="x")


@pytest.mark.parametrize(
    "call",
    [
        '{"tool":"write","arguments":{"path":"mod\\npy/a.py","content":"x"}}',
        '{"tool":"glob","arguments":{"pat":"mod\\npy"}}',
        '{"tool":"grep","arguments":{"pat":"a\\tb"}}',
        '{"tool":"read","arguments":{"path":"a\\n.py"}}',
    ],
)
def test_a_path_or_pattern_is_one_line(grammar: ToolCallGrammar, call: str) -> None:
    """A newline or tab in a path or a search pattern names nothing anyone means: the
    grammar does not write one and the tools refuse one in words."""
    assert not grammar.accepts(_tokens(grammar, call))
    assert grammar.accepts(_tokens(grammar, call.replace("\\n", "_").replace("\\t", "_")))
    with pytest.raises(ValueError, match="newline or control character"):
        ToolCall.model_validate(json.loads(call)).parsed()


def test_a_forbidden_prefix_keeps_a_path_on_one_line() -> None:
    import re

    pattern = not_prefixed_regex(["vendor/"], r"\x00-\x1f*?")
    for text in ["src/a.py", "vendo", "vendorx/a"]:
        assert re.fullmatch(pattern, text), text
    for text in ["vendor/a", "src/\na.py", "v\tx", "src/*.py", "vendorx/\n"]:
        assert not re.fullmatch(pattern, text), text


def test_not_prefixed_regex_is_the_complement() -> None:
    import re

    pattern = not_prefixed_regex(["npm ", "np-x", "vendor/"])
    for text in ["", "n", "np", "npm", "npmx", "pnpm i", "vendo", "vendorx/a", "ls\nnpm i"]:
        assert re.fullmatch(pattern, text), text
    for text in ["npm i", "np-x", "vendor/", "vendor/a/b"]:
        assert not re.fullmatch(pattern, text), text


def test_done_is_an_answer_and_the_grammar_narrows_to_it() -> None:
    """`done` carries one paragraph of summary: the narrowed grammar writes only that."""
    only_done = [b["properties"]["tool"]["const"] for b in decoding_schema(["done"])["oneOf"]]
    assert only_done == ["done"]
    tokenizer = load_tokenizer()
    narrowed = ToolCallGrammar(
        tokenizer, decoding_schema(["done"]), ll_tokenizer=ToolCallGrammar(tokenizer).ll_tokenizer
    )
    finish = '{"tool":"done","arguments":{"summary":"mean() divides with /; the test passes."}}'
    assert narrowed.accepts(_tokens(narrowed, finish))
    for text in (
        '{"tool":"read","arguments":{"path":"a.py"}}',
        '{"tool":"done","arguments":{"summary":""}}',
        '{"tool":"done","arguments":{"summary":"fixed\\n\\nand more"}}',
        '{"tool":"done","arguments":{"summary":"' + "x" * 301 + '"}}',
    ):
        assert not narrowed.accepts(_tokens(narrowed, text)), text
