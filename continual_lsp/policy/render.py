"""ChatML renderer: messages + the tools and done → prompt tokens; completion text → one call.

Formats, chosen for a 135M model with an ~8k window where CPU prefill costs ~2 ms/token:

* **System prompt.** One short instruction plus one line per tool: the tool name, a
  compact form of its JSON argument schema (`"offset"?: integer` marks an optional key)
  and the docstring of its argument model. It is generated from `tools.base`, so a tool
  change cannot leave the prompt stale. Caller-supplied system messages (for instance
  context bullets) are appended to it rather than replacing it.
* **Canonical call.** `{"tool":"read","arguments":{"path":"a.py"}}`: compact separators,
  keys in schema order, optional keys left out instead of written as `null`, non-ASCII
  kept raw. This is exactly the text the grammar (`local/grammar.py`) lets the model write, so
  `render_call` (a training demonstration) and a sampled call share one form.
* **Tool results.** SmolLM2's template has no tool role and the model never saw one, so
  a `tool` message is rendered as a *user* turn that starts with `Tool result:` (a
  plain-language marker the model can read; an unknown `<|im_start|>tool` role would be
  out of distribution). The assistant turn carries the canonical call text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from continual_lsp.policy.base import Message
from continual_lsp.text import clip
from continual_lsp.tools.base import ARG_MODELS, TOOL_NAMES, ToolCall, ToolResult, tool_schema

# How much of a malformed completion an error message shows.
SHOWN_CHARS = 120

SYSTEM_INSTRUCTION = (
    "You are a coding agent working in the user's repository. Each turn, reply with exactly "
    'one JSON tool call {"tool": NAME, "arguments": {...}} and nothing else. '
    "Paths are relative to the repository root. Tools:"
)
TOOL_RESULT_PREFIX = "Tool result:\n"
_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)


def _type_name(schema: dict[str, Any]) -> str:
    """Short type of one property: `string`, `integer`, `boolean` (null branches dropped)."""
    if "anyOf" in schema:
        names = [_type_name(s) for s in schema["anyOf"] if s.get("type") != "null"]
        return "|".join(names)
    return str(schema.get("type", "any"))


def compact_schema(name: str) -> str:
    """`{"path": string, "offset"?: integer}`: the argument schema at a few tokens a key.

    Length and range bounds are left out of the prompt on purpose: the grammar enforces
    them, and every prompt token is paid for on every turn.
    """
    schema = tool_schema(name)
    required = set(schema.get("required", []))
    parts = []
    for key, prop in schema["properties"].items():
        optional = "" if key in required else "?"
        parts.append(f'"{key}"{optional}: {_type_name(prop)}')
    return "{" + ", ".join(parts) + "}"


def default_system_prompt(tools: list[str] | tuple[str, ...] | None = None) -> str:
    """The instruction and one line per tool (all eight answers, or the allowed `tools`)."""
    lines = [SYSTEM_INSTRUCTION]
    for name in TOOL_NAMES:
        if tools is not None and name not in tools:
            continue
        doc = (ARG_MODELS[name].__doc__ or "").strip().splitlines()[0]
        lines.append(f"- {name} {compact_schema(name)}: {doc}")
    return "\n".join(lines)


def canonical_arguments(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Validated arguments in schema order, optional keys that are None dropped.

    Raises ValueError (pydantic's ValidationError is one) when they do not validate.
    """
    model = ARG_MODELS[tool].model_validate(arguments)
    return model.model_dump(exclude_none=True)


def call_text(call: ToolCall) -> str:
    """The canonical JSON text of `call` (what the grammar lets the model write)."""
    payload = {"tool": call.tool, "arguments": canonical_arguments(call.tool, call.arguments)}
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    # JSON allows a raw DEL inside strings, but llguidance's JSON grammar only accepts it
    # escaped; escape it so every canonical call is also a grammar-accepted call.
    return text.replace("\x7f", "\\u007f")


def format_result(result: ToolResult) -> str:
    """Tool output as the model sees it next turn (status line only when it matters)."""
    head = []
    if not result.ok:
        head.append(
            "error" if result.exit_code is None else f"failed, exit code {result.exit_code}"
        )
    elif result.exit_code not in (None, 0):
        head.append(f"exit code {result.exit_code}")
    if result.truncated:
        head.append("output truncated")
    body = result.output or "(no output)"
    return f"({'; '.join(head)})\n{body}" if head else body


class TokenizerText:
    """Plain text ↔ tokens with the model's tokenizer; every renderer has these."""

    tokenizer: Any

    def tokenize(self, text: str) -> list[int]:
        """Tokens of plain text (special-token strings in it are still recognised)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, tokens: list[int]) -> str:
        # No clean-up: transformers' default space clean-up would change code (" ." → ".")
        # and break the render_call → parse_call round trip.
        return str(self.tokenizer.decode(tokens, clean_up_tokenization_spaces=False))


class ChatMLRenderer(TokenizerText):
    """Implements `policy.base.Renderer` for ChatML tokenizers (SmolLM2 and its kin)."""

    def __init__(
        self,
        tokenizer: Any,
        system_prompt: str | None = None,
        tools: list[str] | tuple[str, ...] | None = None,
    ) -> None:
        """`tools`: list only these tools in the default system prompt (None = all)."""
        self.tokenizer = tokenizer
        if tools is not None and set(tools) - set(TOOL_NAMES):
            raise ValueError(f"unknown tools {sorted(set(tools) - set(TOOL_NAMES))}")
        self.system_prompt = (
            system_prompt if system_prompt is not None else default_system_prompt(tools)
        )
        end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        if not isinstance(end, int) or end == tokenizer.unk_token_id:
            end = tokenizer.eos_token_id
        self.end_of_turn_id: int = int(end)
        self.end_of_turn: str = tokenizer.convert_ids_to_tokens(self.end_of_turn_id)

    # -- prompts ------------------------------------------------------------------------

    def chat(self, messages: list[Message]) -> list[dict[str, str]]:
        """The messages as the chat template gets them: one system turn, no tool role."""
        system = [self.system_prompt]
        turns: list[dict[str, str]] = []
        for message in messages:
            if message.role == "system":
                system.append(message.content)
            elif message.role == "tool":
                turns.append({"role": "user", "content": TOOL_RESULT_PREFIX + message.content})
            else:
                turns.append({"role": message.role, "content": message.content})
        return [{"role": "system", "content": "\n\n".join(system)}, *turns]

    def prompt_text(self, messages: list[Message]) -> str:
        return str(
            self.tokenizer.apply_chat_template(
                self.chat(messages), tokenize=False, add_generation_prompt=True
            )
        )

    def render_prompt(self, messages: list[Message]) -> list[int]:
        """Prompt tokens ending with the assistant header, ready for `Policy.sample`."""
        return self.tokenize(self.prompt_text(messages))

    def turn_messages(self, call: ToolCall, result: ToolResult | str) -> list[Message]:
        """The executed call and its result, to append to the conversation for next turn.

        The assistant turn holds the canonical call text; the result is a `tool` message,
        which `render_prompt` shows as a user turn starting with `Tool result:`.
        """
        output = result if isinstance(result, str) else format_result(result)
        return [
            Message(role="assistant", content=call_text(call)),
            Message(role="tool", content=output),
        ]

    # -- calls --------------------------------------------------------------------------

    def render_call(self, call: ToolCall) -> list[int]:
        """Tokens the model writes for `call`: canonical JSON, then the end-of-turn token.

        Raises ValueError when the arguments do not validate, or when the tokenizer cannot
        write the text (SmolLM2's byte-level vocabulary lacks the UTF-8 lead bytes of the
        unassigned planes 4-11, so such characters would be silently dropped).
        """
        text = call_text(call)
        tokens = self.tokenize(text)
        if self.decode(tokens) != text:
            raise ValueError("the call contains characters this model's tokenizer cannot write")
        return [*tokens, self.end_of_turn_id]

    def parse_call(self, text: str) -> ToolCall:
        """Exactly one tool call, arguments validated and canonical; else ValueError.

        Lenient only about framing (whitespace, the end-of-turn token, one ```json fence)
        so that calls from a larger remote model parse too; the JSON itself must be one
        object with exactly the keys `tool` and `arguments`.
        """
        body = text.strip()
        if body.endswith(self.end_of_turn):
            body = body[: -len(self.end_of_turn)].rstrip()
        fenced = _FENCE.match(body)
        if fenced:
            body = fenced.group(1).strip()
        if not body:
            raise ValueError("no tool call: the completion is empty")
        try:
            value, end = json.JSONDecoder().raw_decode(body)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"the tool call is not valid JSON ({exc}): {clip(body, SHOWN_CHARS)}"
            ) from exc
        if body[end:].strip():
            raise ValueError(
                f"expected exactly one tool call, found text after it: {clip(body[end:], SHOWN_CHARS)}"
            )
        if not isinstance(value, dict):
            raise ValueError(f"the tool call must be a JSON object, got {type(value).__name__}")
        keys = set(value)
        if keys != {"tool", "arguments"}:
            raise ValueError(
                'the tool call must have exactly the keys "tool" and "arguments", got '
                + (", ".join(sorted(map(repr, keys))) or "none")
            )
        tool = value["tool"]
        if tool not in TOOL_NAMES:
            raise ValueError(f"unknown tool {tool!r}; the tools are {', '.join(TOOL_NAMES)}")
        arguments = value["arguments"]
        if not isinstance(arguments, dict):
            raise ValueError(f'"arguments" of {tool} must be a JSON object')
        try:
            canonical = canonical_arguments(tool, arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            raise ValueError(f"invalid arguments for {tool}: {problems}") from exc
        return ToolCall(tool=tool, arguments=canonical)
