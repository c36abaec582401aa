"""The detector's rule score: standing cues raise it, task-list openers lower it."""

from __future__ import annotations

import pytest

from continual_lsp.lanes.detector import rule_score


@pytest.mark.parametrize(
    "text",
    [
        "Run the unit tests on every commit.",
        "Lint before each push.",
        "Regenerate the client after any change to the schema.",
    ],
)
def test_a_trigger_on_every_commit_or_change_is_standing(text: str) -> None:
    assert rule_score(text) >= 0.75, text


@pytest.mark.parametrize(
    "text",
    [
        "Set up CI for the monorepo",
        "Configure the Postgres connection pool",
        "Update the onboarding guide",
        "Deploy the staging environment",
        "Investigate the flaky login test",
    ],
)
def test_task_list_openers_read_as_requests(text: str) -> None:
    assert rule_score(text) < 0.5, text


def test_an_opener_with_a_modal_is_still_a_rule() -> None:
    assert rule_score("Always update the changelog when you change the API.") >= 0.75
