"""The starter's anchors: what each SDPO step rehearses so a lesson does not unlearn the job."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from continual_lsp.agent.conversation import Conversation
from continual_lsp.config import Settings
from continual_lsp.learning.anchors import anchor_datums, load_anchors, rehearsed_anchors
from continual_lsp.policy.render import ChatMLRenderer


def test_the_shipped_starter_has_anchors_for_the_embedded_model_only() -> None:
    assert len(load_anchors(Settings())) >= 16
    assert load_anchors(Settings(starter=False)) == ()
    assert load_anchors(Settings(model="/models/another")) == ()
    assert load_anchors(Settings(backend="tinker")) == ()


def test_each_step_takes_the_next_anchors_in_turn() -> None:
    pool = rehearsed_anchors(load_anchors(Settings()))
    settings = Settings(anchors_per_step=2, anchor_advantage=0.5)
    first, second = anchor_datums(settings, 0), anchor_datums(settings, 1)
    assert [d.completion_tokens for d in first] == [a.completion_tokens for a in pool[:2]]
    assert [d.completion_tokens for d in second] == [a.completion_tokens for a in pool[2:4]]
    # On-policy (no behaviour logprobs: ratio 1), the advantage on every call token.
    assert all(d.old_logprobs == [] for d in first)
    assert all(set(d.advantages) == {0.5} for d in first + second)
    wrapped = anchor_datums(settings, len(pool))  # the pool, then round again
    assert len(wrapped) == 2
    assert anchor_datums(Settings(anchors_per_step=0), 3) == []


@pytest.fixture(scope="module")
def renderer(chatml_renderer: Any) -> ChatMLRenderer:
    return chatml_renderer


def test_the_anchors_are_the_agents_current_prompt_and_a_call(renderer: ChatMLRenderer) -> None:
    """A change to the system prompt or the tool schema leaves stale anchors behind:
    regenerate them (`python -m continual_lsp.curriculum.train anchors`)."""
    system = renderer.render_prompt(Conversation("x").messages())
    n = len(system) - 20  # the task's own words start past here
    for anchor in load_anchors(Settings()):
        assert anchor.prompt_tokens[:n] == system[:n]
        renderer.parse_call(renderer.decode(anchor.completion_tokens))


def test_tools_take_turns_and_keep_their_own_order() -> None:
    from continual_lsp.learning.anchors import Anchor, tools_in_turn

    def a(tool: str, n: int) -> Anchor:
        return Anchor(prompt_tokens=[n], completion_tokens=[1], kind="k", tool=tool)

    drawn = [a("read", 1), a("read", 2), a("read", 3), a("edit", 4), a("done", 5)]
    picked = tools_in_turn(drawn, 4)
    assert [(x.tool, x.prompt_tokens[0]) for x in picked] == [
        ("done", 5), ("edit", 4), ("read", 1), ("read", 2)
    ]  # fmt: skip
    assert len(tools_in_turn(drawn, 10)) == 5


def test_a_damaged_anchors_file_rehearses_and_gates_nothing_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A truncated line (a copy cut short) must not fail every training job: no
    anchors, no gate, one warning that names the file, the line and the fix."""
    from continual_lsp.learning import anchors

    shipped = anchors.model_files.STARTER_DIR / anchors.ANCHORS_FILE
    lines = shipped.read_text(encoding="utf-8").splitlines()
    monkeypatch.setattr(anchors.model_files, "STARTER_DIR", tmp_path)
    damaged = tmp_path / anchors.ANCHORS_FILE
    damaged.write_text("\n".join([lines[0], lines[1][:40]]) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger=anchors.__name__):
        assert load_anchors(Settings()) == ()
        assert anchor_datums(Settings(), 0) == []
        assert anchors.skill_cost(object(), Settings()) is None  # type: ignore[arg-type]
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "line 2" in warned[0] and "curriculum.train anchors" in warned[0]
    damaged.write_bytes(b"\xff\xfe not text\n")
    os.utime(damaged, (1, 1))  # another version of the file: read again, not the cached ()
    with caplog.at_level(logging.WARNING, logger=anchors.__name__):
        assert load_anchors(Settings()) == ()
    assert "unreadable" in caplog.records[-1].getMessage()
