"""Curriculum sequences are what the agent would see and what the grammar lets it write."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from continual_lsp.agent.conversation import Conversation
from continual_lsp.curriculum.episodes import Sequence, generate, kind_at, walk
from continual_lsp.curriculum.exercises import Builder, load_vocab
from continual_lsp.policy.local.grammar import ToolCallGrammar
from continual_lsp.policy.render import ChatMLRenderer
from continual_lsp.tools.base import ToolCall
from tests.policy.test_render import load_tokenizer


@pytest.fixture(scope="module")
def renderer() -> ChatMLRenderer:
    return ChatMLRenderer(load_tokenizer())


def test_exercises_are_deterministic_per_seed() -> None:
    def draw(seed: int) -> list[tuple[str, dict[str, str]]]:
        b = Builder(load_vocab(), random.Random(seed))
        return [(s.task, s.files) for s in (b.exercise(k) for k in Builder.KINDS)]

    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


@pytest.mark.slow
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
    s = next(s for s in (builder.exercise("remove_line") for _ in range(200)) if s.untrained == {0})
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


def _spans(renderer: ChatMLRenderer, seq: Sequence) -> list[ToolCall]:
    return [renderer.parse_call(renderer.decode(seq.tokens[a:b])) for a, b in seq.spans]


@pytest.mark.slow
@pytest.mark.parametrize("kind", Builder.MULTI_STEP_KINDS)
def test_a_multi_step_episode_runs_the_check_reads_fixes_reruns_and_is_done(
    renderer: ChatMLRenderer, kind: str
) -> None:
    """Run the check (real output: it fails and names a file), look, change, run it again
    (it passes), then `done`: 4-6 trained calls in one sequence, the real results between."""
    vocab = load_vocab()
    builder = Builder(vocab, random.Random(31))
    seen_langs = set()
    for i in range(6):
        s = builder.exercise(kind)
        rng = random.Random(i)
        trajectory = [q for q in walk(s, renderer, vocab, rng) if q.episode != "correction"]
        assert trajectory, "the check failed before the fix and passed after it"
        seq = max(trajectory, key=lambda q: len(q.spans))
        calls = _spans(renderer, seq)
        assert 4 <= len(calls) <= 6
        assert calls[0] == ToolCall(tool="bash", arguments={"cmd": s.check})
        assert calls[-2] == calls[0]  # the check again, after the change
        assert calls[-1].tool == "done" and s.target in calls[-1].arguments["summary"]
        changes = [c for c in calls if c.tool in ("edit", "edit_lines")]
        assert len(changes) == 1 and changes[0].arguments["path"] == s.target
        text = renderer.decode(seq.tokens)
        first, rerun = text.split("Tool result:")[1], text.split("Tool result:")[-1]
        assert first.lstrip().startswith("(exit code ")  # the real failing run
        assert "exit code" not in rerun
        # The real output names where it failed: the module, or its test (same stem).
        assert re.search(rf"\b{Path(s.target).stem}\.|test_{Path(s.target).stem}", first), first
        seen_langs.add(s.language)
    assert seen_langs == {"py", "js"}


@pytest.mark.slow
def test_every_trajectory_ends_with_done_after_its_change(renderer: ChatMLRenderer) -> None:
    """Every kind but add_dep (whose package manager is never run) ends with `done` and a
    summary that names the file; nothing but the last call is `done`."""
    vocab = load_vocab()
    sequences, dropped = generate(renderer, 2 * 17, seed=5, vocab=vocab)
    assert dropped == 0
    ends = {}
    for seq in sequences:
        if seq.episode.startswith("correction"):
            continue
        calls = _spans(renderer, seq)
        assert all(c.tool != "done" for c in calls[:-1])
        ends.setdefault(seq.kind, set()).add(calls[-1].tool)
    assert set(ends) == set(Builder.KINDS) | set(Builder.MULTI_STEP_KINDS)
    for kind, tools in ends.items():
        assert ("done" in tools) == (kind != "add_dep"), (kind, tools)


def test_a_check_that_passes_before_the_change_drops_the_exercise(
    renderer: ChatMLRenderer,
) -> None:
    """The failing run is real: a workspace whose tests already pass is no episode."""
    vocab = load_vocab()
    s = Builder(vocab, random.Random(3)).exercise("failing_test")
    n = s.facts["n"]
    lines = s.files[s.target].split("\n")
    lines[n - 1] = s.facts["new"]
    s.files[s.target] = "\n".join(lines)
    assert walk(s, renderer, vocab, random.Random(0)) == []


def test_the_multi_step_share_is_kept_and_every_kind_comes_in_turn() -> None:
    one_step = len(Builder.KINDS)
    kinds = [kind_at(i, 0.5) for i in range(4 * one_step)]
    multi = [k for k in kinds if k in Builder.MULTI_STEP_KINDS]
    assert len(multi) == 2 * one_step
    assert multi[:4] == list(Builder.MULTI_STEP_KINDS)
    assert [k for k in kinds if k in Builder.KINDS] == list(Builder.KINDS) * 2
    every = Builder.KINDS + Builder.MULTI_STEP_KINDS
    assert [kind_at(i) for i in range(len(every))] == list(every)


def test_a_commit_exercise_commits_the_staged_fix_in_a_real_repository(
    renderer: ChatMLRenderer,
) -> None:
    """The workspace is a git repository with the fix staged: the look shows the diff,
    the commit goes through, and the message is in the trained call and the summary."""
    vocab = load_vocab()
    builder = Builder(vocab, random.Random(4))
    for i in range(4):
        s = builder.exercise("commit")
        trajectory = [q for q in walk(s, renderer, vocab, random.Random(i)) if q.spans]
        seq = max(trajectory, key=lambda q: len(q.spans))
        calls = _spans(renderer, seq)
        assert [c.tool for c in calls] == ["bash", "bash", "done"]
        assert calls[1].arguments["cmd"] == f'git commit -m "{s.facts["message"]}"'
        assert s.facts["message"] in calls[2].arguments["summary"]
        results = renderer.decode(seq.tokens).split("Tool result:")[1:]
        assert f"+{s.facts['new']}" in results[0]  # the staged diff, not the whole file
        assert "1 file changed" in results[1]  # git made the commit


def test_a_denied_commit_and_test_path_are_retried_as_the_correction_says(
    renderer: ChatMLRenderer,
) -> None:
    """A team's conventions no task states: a ticket id first in the commit message, the
    tests in another folder. The denial names it; the trained retry follows it."""
    vocab = load_vocab()
    builder = Builder(vocab, random.Random(6))
    seen = set()
    for i in range(200):
        s = builder.exercise(("commit", "add_test")[i % 2])
        for q in walk(s, renderer, vocab, random.Random(i)):
            if q.episode not in ("correction:ticket", "correction:test_dir"):
                continue
            (retry,) = _spans(renderer, q)
            denial = renderer.decode(q.tokens).rsplit("The reviewer denied your last call:", 1)
            if q.episode == "correction:ticket":
                assert retry.arguments["cmd"].startswith(f'git commit -m "{s.facts["prefix"]}')
            else:
                assert retry.arguments["path"] == s.target
                assert s.target.rsplit("/", 1)[0] in denial[1]
            seen.add(q.episode)
        if len(seen) == 2:
            break
    assert seen == {"correction:ticket", "correction:test_dir"}
