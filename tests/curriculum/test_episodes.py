"""Curriculum sequences are what the agent would see and what the grammar lets it write."""

from __future__ import annotations

import random

import pytest

from continual_lsp.agent.conversation import Conversation
from continual_lsp.curriculum.episodes import generate, walk
from continual_lsp.curriculum.situations import Builder, load_vocab
from continual_lsp.policy.grammar import ToolCallGrammar
from continual_lsp.policy.render import ChatMLRenderer
from tests.policy.test_render import load_tokenizer


@pytest.fixture(scope="module")
def renderer() -> ChatMLRenderer:
    return ChatMLRenderer(load_tokenizer())


def test_situations_are_deterministic_per_seed() -> None:
    def draw(seed: int) -> list[tuple[str, dict[str, str]]]:
        b = Builder(load_vocab(), random.Random(seed))
        return [(s.task, s.files) for s in (b.situation(k) for k in Builder.KINDS)]

    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


def test_sequences_match_the_agents_prompt_and_the_grammar(renderer: ChatMLRenderer) -> None:
    sequences, dropped = generate(renderer, len(Builder.KINDS), seed=11, vocab=load_vocab())
    assert dropped == 0  # every generated fix passes its project's check
    grammar = ToolCallGrammar(renderer.tokenizer)
    first_prompt = renderer.render_prompt(Conversation("x").messages())
    header = renderer.tokenize("<|im_start|>assistant\n")
    episodes = {s.episode.split(":")[0] for s in sequences}
    assert {"trajectory", "correction"} <= episodes
    for seq in sequences:
        # The agent's system prompt, verbatim.
        assert seq.tokens[: len(first_prompt) - 20] == first_prompt[: len(first_prompt) - 20]
        for a, b in seq.spans:
            target = seq.tokens[a:b]
            assert grammar.accepts(target), renderer.decode(target)
            assert seq.tokens[a - len(header) : a] == header
            renderer.parse_call(renderer.decode(target))
    denial = next(s for s in sequences if s.episode.startswith("correction"))
    assert "The reviewer denied your last call:" in renderer.decode(denial.tokens)


def test_a_wrong_first_look_is_shown_but_not_trained(renderer: ChatMLRenderer) -> None:
    """A slip (grep of a plain word, or reading the README, when the task names no file)
    is in the history the next call sees, but no loss span covers it; the first span is
    the recovery, a grep for the name."""
    builder = Builder(load_vocab(), random.Random(2))
    s = next(
        s for s in (builder.situation("remove_line") for _ in range(200)) if s.untrained == {0}
    )
    slip, recovery = s.plan[0], s.plan[1]
    assert recovery.tool == "grep" and recovery.arguments["pat"] == s.facts["fn"]
    trajectory = next(
        q for q in walk(s, renderer, load_vocab(), random.Random(0)) if q.episode == "trajectory"
    )
    text = renderer.decode(trajectory.tokens)
    assert renderer.decode(renderer.render_call(slip)).strip() in text
    trained = [renderer.decode(trajectory.tokens[a:b]) for a, b in trajectory.spans]
    assert renderer.parse_call(trained[0]) == recovery
    assert all(renderer.parse_call(t) != slip for t in trained)
