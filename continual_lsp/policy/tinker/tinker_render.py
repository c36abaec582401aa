"""Renderers for Tinker's models, behind the same `Renderer` contract as the local backend.

The local backend's small model writes one canonical JSON object under a grammar
(`render.py`). Tinker's models (Qwen3, Llama 3, DeepSeek, …) were post-trained on their own
native tool-calling formats, and Tinker samples without a grammar, so here each model gets
its native format: the seven tools are declared as function specs in the system turn, the
model answers with e.g. `<tool_call>{"name": …, "arguments": …}</tool_call>`, and earlier
calls in the conversation are shown back in that same format.

Two implementations, chosen by `make_tinker_renderer`:

* `CookbookRenderer` wraps a `tinker_cookbook.renderers.Renderer` (the renderers Tinker's
  own examples train with: exact tokens, stop sequences, tool-call parsing). tinker-cookbook
  is imported lazily: its wheel pins transformers ≤ 5.5.4 and torch ≥ 2.10, so it cannot be a
  normal dependency beside this project's transformers 5.x; install it with
  `pip install --no-deps tinker-cookbook==0.5.8 pillow` (see docs/tinker.md).
* `ChatTemplateRenderer` is the fallback when the cookbook cannot be imported: the HF
  tokenizer's own chat template with `tools=`. A template that ignores tools (plain ChatML,
  for instance) is detected and the canonical JSON call of `render.py` is used instead.

Whatever the format, `parse_call` returns a `ToolCall` whose arguments are validated and
canonical (schema order, no `None`s), exactly as the local renderer's, so guards, previews
and the store see the same objects from either backend.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Protocol

from continual_lsp.policy.base import Message
from continual_lsp.policy.render import (
    SHOWN_CHARS,
    TokenizerText,
    call_text,
    canonical_arguments,
    default_system_prompt,
)
from continual_lsp.text import clip
from continual_lsp.tools.base import ARG_MODELS, TOOL_NAMES, ToolCall, tool_schema

log = logging.getLogger(__name__)

SYSTEM_INSTRUCTION = (
    "You are a coding agent working in the user's repository. Each turn, call exactly one "
    "of the tools, with arguments that match its schema, and write nothing else. Paths are "
    "relative to the repository root."
)

COOKBOOK_INSTALL_HINT = (
    "pip install --no-deps 'tinker-cookbook==0.5.8' pillow  "
    "(--no-deps: its wheel would downgrade transformers)"
)

_TOOL_CALL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)


class RendererUnavailable(RuntimeError):
    """No renderer can be built for this model and tokenizer; the message says why."""


def tool_specs() -> list[dict[str, Any]]:
    """The tools and done as OpenAI-style function specs (name, description, JSON schema).

    Generated from `tools.base`, like the local system prompt, so a tool change cannot leave
    a remote model's prompt stale. Pydantic's `title` keys are dropped: they only repeat the
    property names and cost prompt tokens on every turn.
    """
    specs = []
    for name in TOOL_NAMES:
        doc = (ARG_MODELS[name].__doc__ or "").strip().splitlines()[0]
        parameters = _strip_titles(tool_schema(name))
        parameters.pop("description", None)  # the same docstring as the tool's description
        specs.append({"name": name, "description": doc, "parameters": parameters})
    return specs


def _strip_titles(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_titles(v) for k, v in node.items() if k != "title"}
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def validated_call(tool: Any, arguments: Any) -> ToolCall:
    """A `ToolCall` with canonical arguments, or ValueError naming what is wrong."""
    if tool not in TOOL_NAMES:
        raise ValueError(f"unknown tool {tool!r}; the tools are {', '.join(TOOL_NAMES)}")
    if isinstance(arguments, str):
        # OpenAI-style function bodies carry the arguments as a JSON string.
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the arguments of {tool} are not valid JSON ({exc})") from exc
    if not isinstance(arguments, dict):
        raise ValueError(f'"arguments" of {tool} must be a JSON object')
    try:
        canonical = canonical_arguments(tool, arguments)
    except ValueError as exc:
        raise ValueError(f"invalid arguments for {tool}: {exc}") from exc
    return ToolCall(tool=tool, arguments=canonical)


def parse_call_text(text: str) -> ToolCall:
    """One tool call from free text, in any format a remote model plausibly writes.

    Accepted, in this order: a single `<tool_call>…</tool_call>` block (Qwen/Hermes), or one
    bare JSON object, either `{"name": …, "arguments"|"parameters": …}` (Llama 3.1 style) or
    the canonical `{"tool": …, "arguments": …}` (the local backend's form). Anything else,
    or more than one call, is a ValueError with a clear message.
    """
    body = text.strip()
    blocks = _TOOL_CALL_BLOCK.findall(body)
    if len(blocks) > 1:
        raise ValueError(f"expected exactly one tool call, found {len(blocks)}")
    if blocks:
        body = blocks[0]
    else:
        fenced = _FENCE.match(body)
        if fenced:
            body = fenced.group(1).strip()
    if not body:
        raise ValueError("no tool call: the completion is empty")
    start = body.find("{")
    if start < 0:
        raise ValueError(f"no tool call in the completion: {clip(body, SHOWN_CHARS)}")
    try:
        value, end = json.JSONDecoder().raw_decode(body[start:])
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"the tool call is not valid JSON ({exc}): {clip(body, SHOWN_CHARS)}"
        ) from exc
    if body[start + end :].strip():
        raise ValueError(
            f"expected exactly one tool call, found text after it: {clip(body[start + end :], SHOWN_CHARS)}"
        )
    if not isinstance(value, dict):
        raise ValueError(f"the tool call must be a JSON object, got {type(value).__name__}")
    if "tool" in value:
        return validated_call(value["tool"], value.get("arguments", {}))
    if "name" in value:
        return validated_call(value["name"], value.get("arguments", value.get("parameters", {})))
    raise ValueError('the tool call names no tool (expected a "name" or "tool" key)')


def _canonical_or_none(content: str) -> ToolCall | None:
    """The call an assistant history message holds, if it holds exactly one."""
    try:
        return parse_call_text(content)
    except ValueError:
        return None


class TinkerRenderer(Protocol):
    """`policy.base.Renderer` plus what the Tinker backend needs to sample."""

    tokenizer: Any

    def render_prompt(self, messages: list[Message]) -> list[int]: ...

    def render_call(self, call: ToolCall) -> list[int]: ...

    def parse_call(self, text: str) -> ToolCall: ...

    def stop(self) -> list[int] | list[str]: ...

    def decode(self, tokens: list[int]) -> str: ...

    def tokenize(self, text: str) -> list[int]: ...


# -- tinker-cookbook ------------------------------------------------------------------------


class CookbookRenderer(TokenizerText):
    """Adapts a `tinker_cookbook` renderer to the `Renderer` protocol.

    History: an assistant message whose content is a call (the agent stores the canonical
    JSON) is re-rendered as a native tool call with an id, and the `tool` message after it
    carries that id and the tool's name (Kimi renders ids, GPT-OSS renders names).
    """

    def __init__(
        self, cookbook_renderer: Any, tokenizer: Any, system_prompt: str = SYSTEM_INSTRUCTION
    ):
        self.impl = cookbook_renderer
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.name = type(cookbook_renderer).__name__

    def _cookbook_messages(self, messages: list[Message]) -> list[dict[str, Any]]:
        from tinker_cookbook.renderers import ToolCall as CookbookToolCall

        system = [self.system_prompt, *(m.content for m in messages if m.role == "system")]
        out: list[dict[str, Any]] = list(
            self.impl.create_conversation_prefix_with_tools(tool_specs(), "\n\n".join(system))
        )
        last_call: tuple[str, str] | None = None
        for index, message in enumerate(m for m in messages if m.role != "system"):
            if message.role == "assistant" and (call := _canonical_or_none(message.content)):
                call_id = f"call_{index}"
                last_call = (call_id, call.tool)
                body = CookbookToolCall.FunctionBody(
                    name=call.tool, arguments=json.dumps(call.arguments, ensure_ascii=False)
                )
                out.append(
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [CookbookToolCall(function=body, id=call_id)],
                    }
                )
            elif message.role == "tool":
                entry: dict[str, Any] = {"role": "tool", "content": message.content}
                if last_call is not None:
                    entry["tool_call_id"], entry["name"] = last_call
                out.append(entry)
            else:
                out.append({"role": message.role, "content": message.content})
        return out

    def render_prompt(self, messages: list[Message]) -> list[int]:
        return list(self.impl.build_generation_prompt(self._cookbook_messages(messages)).to_ints())

    def render_call(self, call: ToolCall) -> list[int]:
        """The tokens the model writes for `call` after the generation prompt.

        Rendered as the last message after one user turn (the context some renderers
        consult, e.g. Qwen3's think-block gating), and only the message's output chunks are
        kept: the header belongs to the prompt, which `render_prompt` already ends with.
        """
        from tinker_cookbook.renderers import RenderContext
        from tinker_cookbook.renderers import ToolCall as CookbookToolCall

        body = CookbookToolCall.FunctionBody(
            name=call.tool,
            arguments=json.dumps(
                canonical_arguments(call.tool, call.arguments), ensure_ascii=False
            ),
        )
        user = {"role": "user", "content": "."}
        message = {
            "role": "assistant",
            "content": "",
            "tool_calls": [CookbookToolCall(function=body, id="call_0")],
        }
        ctx = RenderContext(
            idx=1, is_last=True, prev_message=user, last_user_index=0, in_last_assistant_turn=True
        )
        rendered = self.impl.render_message(message, ctx)
        tokens: list[int] = []
        for chunk in rendered.output:
            tokens.extend(chunk.tokens)
        return tokens

    def parse_call(self, text: str) -> ToolCall:
        tokens = self.tokenize(text)
        message, _termination = self.impl.parse_response(tokens)
        calls = message.get("tool_calls") or []
        if len(calls) > 1:
            raise ValueError(f"expected exactly one tool call, found {len(calls)}")
        if calls:
            return validated_call(calls[0].function.name, calls[0].function.arguments)
        # No native call: the model may have written bare JSON (or the canonical form).
        content = message.get("content")
        return parse_call_text(content if isinstance(content, str) else text)

    def stop(self) -> list[int] | list[str]:
        return list(self.impl.get_stop_sequences())

    @property
    def end_of_turn_id(self) -> int | None:
        """The token that ends an assistant turn (learning/sdpo.py strips it from text)."""
        stops = self.stop()
        return stops[0] if stops and isinstance(stops[0], int) else None


# -- HF chat template fallback -------------------------------------------------------------


class ChatTemplateRenderer(TokenizerText):
    """The tokenizer's own chat template, with `tools=`; JSON calls if it ignores tools.

    `native` is True when the template writes tool specs and tool calls (Qwen, Llama 3.1+,
    Hermes-style templates); then calls are rendered through the template and parsed from
    `<tool_call>` blocks or bare JSON. Otherwise the local renderer's system prompt and
    canonical JSON call are used, which any instruct model can follow.
    """

    def __init__(self, tokenizer: Any, system_prompt: str = SYSTEM_INSTRUCTION):
        if getattr(tokenizer, "chat_template", None) is None:
            raise RendererUnavailable("the tokenizer has no chat template")
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.name = "hf-chat-template"
        self.end_of_turn_id = self._end_of_turn_id()
        self.native = True  # probe in native mode; fall back if the template ignores tools
        self.native = self._template_writes_tools()
        if not self.native:
            self.system_prompt = default_system_prompt()

    def _end_of_turn_id(self) -> int:
        for token in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
            token_id = self.tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and token_id != self.tokenizer.unk_token_id:
                return token_id
        return int(self.tokenizer.eos_token_id)

    def _template(self, conversation: list[dict[str, Any]], generation: bool) -> str:
        tools = (
            [{"type": "function", "function": spec} for spec in tool_specs()]
            if self.native
            else None
        )
        return str(
            self.tokenizer.apply_chat_template(
                conversation, tools=tools, tokenize=False, add_generation_prompt=generation
            )
        )

    def _template_writes_tools(self) -> bool:
        probe = ToolCall(tool="glob", arguments={"pat": "zq_probe_*.py"})
        try:
            context = [{"role": "system", "content": "."}, {"role": "user", "content": "."}]
            spec_seen = "edit_lines" in self._template(context, True)
            return spec_seen and "zq_probe_" in self.decode(self._call_suffix(probe))
        except Exception as exc:  # a template that rejects tool_calls: use JSON calls
            log.debug("chat template does not render tool calls: %s", exc)
            return False

    def _conversation(self, messages: list[Message]) -> list[dict[str, Any]]:
        system = [self.system_prompt, *(m.content for m in messages if m.role == "system")]
        out: list[dict[str, Any]] = [{"role": "system", "content": "\n\n".join(system)}]
        for index, message in enumerate(m for m in messages if m.role != "system"):
            call = _canonical_or_none(message.content) if message.role == "assistant" else None
            if call is not None and self.native:
                out.append(self._assistant_call(call, f"call_{index}"))
            elif call is not None:
                out.append({"role": "assistant", "content": call_text(call)})
            elif message.role == "tool" and not self.native:
                out.append({"role": "user", "content": "Tool result:\n" + message.content})
            else:
                out.append({"role": message.role, "content": message.content})
        return out

    @staticmethod
    def _assistant_call(call: ToolCall, call_id: str) -> dict[str, Any]:
        arguments = canonical_arguments(call.tool, call.arguments)
        function = {"name": call.tool, "arguments": arguments}
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }

    def render_prompt(self, messages: list[Message]) -> list[int]:
        return self.tokenize(self._template(self._conversation(messages), True))

    def _call_suffix(self, call: ToolCall) -> list[int]:
        """Tokens between the generation prompt and the end of the assistant turn, inclusive."""
        context = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": "."},
        ]
        prompt = self._template(context, True)
        if self.native:
            turn = self._assistant_call(call, "call_0")
        else:
            turn = {"role": "assistant", "content": call_text(call)}
        full = self._template([*context, turn], False)
        if not full.startswith(prompt):
            raise RendererUnavailable("the chat template does not extend its generation prompt")
        tokens = self.tokenize(full[len(prompt) :])
        if self.end_of_turn_id in tokens:
            # Templates add a newline after the end-of-turn token; sampling stops at it.
            tokens = tokens[: tokens.index(self.end_of_turn_id) + 1]
        else:
            tokens.append(self.end_of_turn_id)
        return tokens

    def render_call(self, call: ToolCall) -> list[int]:
        return self._call_suffix(call)

    def parse_call(self, text: str) -> ToolCall:
        body = text.strip()
        end = self.tokenizer.convert_ids_to_tokens(self.end_of_turn_id)
        if isinstance(end, str) and body.endswith(end):
            body = body[: -len(end)]
        return parse_call_text(body)

    def stop(self) -> list[int]:
        return [self.end_of_turn_id]


# -- choice --------------------------------------------------------------------------------


def cookbook_renderer_name(model_name: str) -> str | None:
    """The renderer tinker-cookbook recommends for `model_name`, or None if it cannot say."""
    try:
        from tinker_cookbook import model_info
    except Exception:
        return None
    try:
        return str(model_info.get_recommended_renderer_name(model_name))
    except Exception:
        return None


def make_tinker_renderer(
    model_name: str, tokenizer: Any, renderer_name: str | None = None
) -> TinkerRenderer:
    """The cookbook's renderer for `model_name` when tinker-cookbook imports, else the
    tokenizer's chat template, with a warning that says how to get the cookbook."""
    try:
        from tinker_cookbook import renderers as cookbook
    except Exception as exc:
        log.warning(
            "tinker-cookbook is not importable (%s: %s); rendering %s with the tokenizer's chat "
            "template instead. For the renderers Tinker's models are trained with: %s",
            type(exc).__name__,
            exc,
            model_name,
            COOKBOOK_INSTALL_HINT,
        )
        return ChatTemplateRenderer(tokenizer)
    name = renderer_name or cookbook_renderer_name(model_name)
    if name is None:
        log.warning("tinker-cookbook has no renderer for %s; using its chat template", model_name)
        return ChatTemplateRenderer(tokenizer)
    impl = cookbook.get_renderer(name, tokenizer, model_name=model_name)
    try:
        impl.create_conversation_prefix_with_tools(tool_specs(), "")
    except NotImplementedError:
        log.warning("cookbook renderer %s has no tool calling; using the chat template", name)
        return ChatTemplateRenderer(tokenizer)
    return CookbookRenderer(impl, tokenizer)
