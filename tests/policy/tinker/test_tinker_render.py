"""Tinker renderers (same contract as the local one) and the PEFT conversion of exports.

The cookbook renderer tests run only where `tinker_cookbook` imports (it is not a project
dependency: see docs/tinker.md); the chat-template fallback runs everywhere the embedded
tokenizer is available.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from continual_lsp.policy.base import Message
from continual_lsp.policy.tinker.tinker_render import (
    ChatTemplateRenderer,
    CookbookRenderer,
    make_tinker_renderer,
    parse_call_text,
    tool_specs,
)
from continual_lsp.tools.base import TOOL_NAMES, ToolCall

CALL = ToolCall(
    tool="edit_lines",
    arguments={"path": "src/calc/ops.py", "start": 3, "end": 4, "content": "x = 2\n"},
)
HISTORY = [
    Message(role="user", content="Task: fix the failing test"),
    Message(role="assistant", content=json.dumps({"tool": "read", "arguments": {"path": "a.py"}})),
    Message(role="tool", content="1: x = 1"),
    Message(role="system", content="Rules from the reviewer:\n- keep diffs small"),
]

# A Hermes/Qwen-style template that declares tools and writes tool calls (as Qwen2.5's does).
NATIVE_TEMPLATE = """{%- for m in messages -%}
{%- if m.role == 'system' -%}<|im_start|>system
{{ m.content }}
{%- if tools %}
<tools>
{% for t in tools %}{{ t | tojson }}
{% endfor %}</tools>{% endif %}<|im_end|>
{% elif m.role == 'assistant' and m.tool_calls -%}<|im_start|>assistant
{% for c in m.tool_calls %}<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif m.role == 'tool' -%}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% else -%}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}"""


# -- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "read", "arguments": {"path": "a.py", "limit": 5}}\n</tool_call>',
        '{"name": "read", "arguments": {"path": "a.py", "limit": 5}}',
        '{"name": "read", "parameters": {"path": "a.py", "limit": 5}}',
        '{"tool":"read","arguments":{"path":"a.py","limit":5}}<|im_end|>'.removesuffix(
            "<|im_end|>"
        ),
        '{"name": "read", "arguments": "{\\"path\\": \\"a.py\\", \\"limit\\": 5}"}',
        '```json\n{"tool": "read", "arguments": {"limit": 5, "path": "a.py"}}\n```',
    ],
)
def test_parse_call_text_formats(text: str) -> None:
    call = parse_call_text(text)
    assert call == ToolCall(tool="read", arguments={"path": "a.py", "limit": 5})
    assert list(call.arguments) == ["path", "limit"]  # canonical: schema order


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("I will read the file.", "no tool call"),
        ('<tool_call>{"name": "read", "arguments": {"path": "a"}}</tool_call>' * 2, "exactly one"),
        ('{"name": "rm", "arguments": {}}', "unknown tool"),
        ('{"name": "read", "arguments": {"path": ""}}', "invalid arguments"),
        ('{"name": "read", "arguments": {"path": "a"}} and more', "text after"),
        ('{"arguments": {"path": "a"}}', "names no tool"),
    ],
)
def test_parse_call_text_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_call_text(text)


def test_tool_specs() -> None:
    specs = tool_specs()
    assert [s["name"] for s in specs] == list(TOOL_NAMES)
    read = specs[0]["parameters"]
    assert (
        read["required"] == ["path"]
        and "title" not in read
        and "title" not in read["properties"]["path"]
    )


# -- chat-template fallback ----------------------------------------------------------------


def test_fallback_json_mode_round_trip(embedded_tokenizer: Any) -> None:
    renderer = ChatTemplateRenderer(embedded_tokenizer)
    assert not renderer.native  # SmolLM2's ChatML template ignores tools
    prompt = renderer.decode(renderer.render_prompt(HISTORY))
    assert "edit_lines" in prompt and "keep diffs small" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    tokens = renderer.render_call(CALL)
    assert tokens[-1] == renderer.end_of_turn_id == renderer.stop()[0]
    assert renderer.parse_call(renderer.decode(tokens)) == CALL


def test_fallback_native_template(embedded_tokenizer: Any) -> None:
    tok = copy.deepcopy(embedded_tokenizer)
    tok.chat_template = NATIVE_TEMPLATE
    renderer = ChatTemplateRenderer(tok)
    assert renderer.native
    prompt = renderer.decode(renderer.render_prompt(HISTORY))
    assert "<tools>" in prompt and '"name": "edit_lines"' in prompt
    # The earlier call is shown back in the model's own format, its result as a response.
    assert '<tool_call>\n{"name": "read", "arguments": {"path": "a.py"}}\n</tool_call>' in prompt
    assert "<tool_response>\n1: x = 1" in prompt
    text = renderer.decode(renderer.render_call(CALL))
    assert text.startswith("<tool_call>") and text.endswith("<|im_end|>")
    assert renderer.parse_call(text) == CALL


def test_make_renderer_falls_back_when_cookbook_is_missing(
    embedded_tokenizer: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "tinker_cookbook", None)  # import fails as if absent
    with caplog.at_level("WARNING"):
        renderer = make_tinker_renderer("Qwen/Qwen3-4B-Instruct-2507", embedded_tokenizer)
    assert isinstance(renderer, ChatTemplateRenderer)
    assert "tinker-cookbook is not importable" in caplog.text and "--no-deps" in caplog.text


# -- tinker-cookbook -------------------------------------------------------------------------


def test_cookbook_renderer_round_trip_and_training_tokens(embedded_tokenizer: Any) -> None:
    cookbook = pytest.importorskip("tinker_cookbook.renderers")
    renderer = make_tinker_renderer("Qwen/Qwen3-4B-Instruct-2507", embedded_tokenizer)
    assert isinstance(renderer, CookbookRenderer) and renderer.name == "Qwen3InstructRenderer"
    prompt_tokens = renderer.render_prompt(HISTORY)
    prompt = renderer.decode(prompt_tokens)
    assert '"name": "edit_lines"' in prompt and "keep diffs small" in prompt
    assert '<tool_call>\n{"name": "read", "arguments": {"path": "a.py"}}\n</tool_call>' in prompt
    call_tokens = renderer.render_call(CALL)
    assert renderer.parse_call(renderer.decode(call_tokens)) == CALL
    assert call_tokens[-1] == renderer.end_of_turn_id == renderer.stop()[0]
    # render_prompt + render_call is exactly the sequence the cookbook trains on, and the
    # call is exactly its trained (weight 1) part: demonstrations match sampled calls.
    conversation = renderer._cookbook_messages(
        [*HISTORY, Message(role="assistant", content=json.dumps(CALL.model_dump()))]
    )
    model_input, weights = renderer.impl.build_supervised_example(
        conversation, cookbook.TrainOnWhat.LAST_ASSISTANT_MESSAGE
    )
    assert model_input.to_ints() == prompt_tokens + call_tokens
    assert weights.tolist() == [0.0] * len(prompt_tokens) + [1.0] * len(call_tokens)


# -- Tinker export → PEFT --------------------------------------------------------------------


def _tiny_llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=48,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()


def _fake_export(directory: Path, model: Any, rank: int, alpha: float) -> None:
    """An export laid out as tinker-cookbook's converter reads Tinker's (dense model)."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(3)
    weights = {}
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in ("q_proj", "k_proj", "v_proj", "o_proj"):
            weights[f"base_model.model.{name}.lora_A.weight"] = (
                torch.randn(rank, module.in_features, generator=g) * 0.1
            )
            weights[f"base_model.model.{name}.lora_B.weight"] = (
                torch.randn(module.out_features, rank, generator=g) * 0.1
            )
    directory.mkdir()
    save_file(weights, str(directory / "adapter_model.safetensors"))
    (directory / "adapter_config.json").write_text(json.dumps({"r": rank, "lora_alpha": alpha}))


def test_export_converts_to_a_peft_adapter_the_local_backend_loads(tmp_path: Path) -> None:
    peft = pytest.importorskip("peft")
    from continual_lsp.policy.local import adapter_files, kv_cache
    from continual_lsp.policy.tinker.tinker_checkpoints import to_peft_adapter

    base = _tiny_llama()
    export = tmp_path / "export"
    _fake_export(export, base, rank=4, alpha=32)
    kept = to_peft_adapter(export, tmp_path / "peft-kept", "tiny-llama")
    local = to_peft_adapter(export, tmp_path / "peft-local", "tiny-llama", lora_alpha=8)
    config = json.loads((kept / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4 and config["lora_alpha"] == 32
    assert config["target_modules"] == ["k_proj", "o_proj", "q_proj", "v_proj"]

    ids = torch.tensor([[1, 5, 9, 14, 3, 7]])
    with torch.no_grad():
        plain = base(input_ids=ids).logits
        # Standard PEFT loading of the converted directory, with the export's own alpha.
        standard = peft.PeftModel.from_pretrained(copy.deepcopy(base), str(kept)).eval()
        expected = standard(input_ids=ids).logits

    # The local backend's path: a LoRA built as LocalPolicy builds it (alpha = 2·rank),
    # weights loaded in place by adapter_files.load_adapter; B was rescaled so it matches.
    class Holder:
        adapter_version = None
        train_state = kv_cache.TrainState()

    holder = Holder()
    lora = peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], lora_dropout=0.0
    )
    holder.model = peft.get_peft_model(copy.deepcopy(base), lora).eval()
    adapter_files.load_adapter(holder, local)
    with torch.no_grad():
        got = holder.model(input_ids=ids).logits
    assert not torch.allclose(expected, plain, atol=1e-4)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert holder.adapter_version == "peft-local"


def test_export_renames_unembed_and_refuses_experts(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    from continual_lsp.policy.tinker.tinker_checkpoints import to_peft_adapter

    src = tmp_path / "src"
    src.mkdir()
    (src / "adapter_config.json").write_text(json.dumps({"r": 2, "lora_alpha": 2}))
    save_file(
        {
            "base_model.model.model.unembed_tokens.lora_A.weight": torch.zeros(2, 8),
            "base_model.model.model.unembed_tokens.lora_B.weight": torch.zeros(16, 2),
        },
        str(src / "adapter_model.safetensors"),
    )
    out = to_peft_adapter(src, tmp_path / "out", "m")
    assert sorted(load_file(str(out / "adapter_model.safetensors"))) == [
        "base_model.model.lm_head.lora_A.weight",
        "base_model.model.lm_head.lora_B.weight",
    ]
    save_file(
        {"base_model.model.model.layers.0.mlp.experts.w1.lora_A.weight": torch.zeros(2, 2)},
        str(src / "adapter_model.safetensors"),
    )
    with pytest.raises(ValueError, match="expert"):
        to_peft_adapter(src, tmp_path / "out2", "m")
