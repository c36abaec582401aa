"""SDPO's teacher context: what the teacher sees that the student did not (DESIGN §4).

The student's own prompt with one extra user turn spliced in before the assistant header:
the reviewer's correction and, when one exists, a demonstration ("A correct call here is:
{…}"); a denial without one shows the calls the reviewer approved after earlier
corrections of the same cluster (context only: they answer other prompts). The denied
call is *never* put in it: the embedded 135M model copies its context, so a teacher that
sees the denied call assigns it high probability and SDPO would reinforce it
(FIELD-NOTES: teacher −4.5 vs student −63.9 on a denied call). What a small teacher can
do is copy a demonstration. Token work only: no weights are read here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from continual_lsp.policy.base import Policy
from continual_lsp.tools.base import ToolCall


def feedback_text(
    correction: str | None, demonstration_text: str | None, example_texts: Sequence[str] = ()
) -> str:
    """The user turn the teacher sees. Never contains the denied call."""
    parts = []
    if correction and correction.strip():
        parts.append(f"The reviewer says: {correction.strip()}")
    if demonstration_text:
        parts.append(f"A correct call here is:\n{demonstration_text}")
    if example_texts:
        parts.append(
            "Calls the reviewer approved after the same correction elsewhere:\n"
            + "\n".join(example_texts)
        )
    return "\n".join(parts)


@dataclass(frozen=True)
class _TurnFormat:
    turn_prefix: str  # text before a user turn's content (ChatML: "<|im_start|>user\n")
    turn_suffix: str  # text after it ("<|im_end|>\n")
    header: str  # the assistant generation header ("<|im_start|>assistant\n")


def _turn_format(tokenizer: Any) -> _TurnFormat | None:
    """Derive the user-turn framing and assistant header from the chat template itself."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    marker = "\x00FEEDBACK\x00"
    base = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]

    def render(messages: list[dict[str, str]], generation: bool) -> str:
        return str(
            tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation
            )
        )

    try:
        plain = render(base, False)
        with_turn = render([*base, {"role": "user", "content": marker}], False)
        with_header = render(base, True)
    except Exception:  # a template that rejects two user turns in a row, say
        return None
    if (
        not with_turn.startswith(plain)
        or not with_header.startswith(plain)
        or marker not in with_turn
    ):
        return None
    turn = with_turn[len(plain) :]
    prefix, suffix = turn.split(marker, 1)
    return _TurnFormat(turn_prefix=prefix, turn_suffix=suffix, header=with_header[len(plain) :])


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def teacher_prompt(policy: Policy, prompt_tokens: list[int], feedback: str) -> list[int]:
    """The student's prompt with a user turn holding `feedback` before the assistant header.

    Works in token space so the teacher context starts with exactly the student's tokens
    (the KV prefix is shared with the student): the trailing assistant header is cut
    off, the feedback turn and the header appended. Without a chat template the feedback
    is appended as plain text.
    """
    tokenizer = policy.tokenizer
    fmt = _turn_format(tokenizer)
    if fmt is None:
        return [*prompt_tokens, *_encode(tokenizer, f"\n\n{feedback}\n\n")]
    header = _encode(tokenizer, fmt.header)
    base = list(prompt_tokens)
    if header and base[-len(header) :] == header:
        base = base[: -len(header)]
    turn = _encode(tokenizer, fmt.turn_prefix + feedback + fmt.turn_suffix)
    return [*base, *turn, *header]


def demonstration_tokens(policy: Policy, call: ToolCall) -> list[int]:
    """Tokens of `call` exactly as the student would write it (ends with end-of-turn)."""
    return list(policy.renderer.render_call(call))


def call_text(policy: Policy, tokens: list[int]) -> str:
    """A rendered call's text without its end-of-turn tokens, as the teacher reads it."""
    eos = {policy.tokenizer.eos_token_id, getattr(policy.renderer, "end_of_turn_id", None)}
    body = [t for t in tokens if t not in eos]
    return str(policy.tokenizer.decode(body, clean_up_tokenization_spaces=False)).strip()
