"""The detector's rule score: standing cues raise it, task-list openers lower it."""

from __future__ import annotations

import pytest

from continual_lsp.lanes.reading import read
from continual_lsp.lanes.routing.detector import detect_offline, guards_in_general, rule_score


@pytest.mark.parametrize(
    "text",
    [
        "Run the unit tests on every commit.",
        "Lint before each push.",
        "Regenerate the client after any change to the schema.",
        "Update `CHANGES.md` when adding a feature.",
    ],
)
def test_a_trigger_on_every_commit_or_change_is_standing(text: str) -> None:
    assert rule_score(read(text)) >= 0.75, text


@pytest.mark.parametrize(
    "text",
    [
        "Set up CI for the monorepo",
        "Configure the Postgres connection pool",
        "Update the onboarding guide",
        "Deploy the staging environment",
        "Investigate the flaky login test",
        "Optimize the thumbnail pipeline",
        "Wire up the settings form to the store",
    ],
)
def test_task_list_openers_read_as_requests(text: str) -> None:
    assert rule_score(read(text)) < 0.5, text


@pytest.mark.parametrize(
    "text",
    [
        "`npm run lint`: Lint every package.",
        "**Release**: `make release` tags and publishes",
        "**Deploy:** run the staging job first",
    ],
)
def test_an_entry_heading_of_a_rules_file_is_standing(text: str) -> None:
    plain = text.replace("**", "").replace("`", "")  # the same words, not an entry heading
    assert rule_score(read(text)) >= rule_score(read(plain)) + 0.2, text


def test_an_opener_with_a_modal_is_still_a_rule() -> None:
    assert rule_score(read("Always update the changelog when you change the API.")) >= 0.75


@pytest.mark.parametrize(
    "text",
    [
        "Package manager: pnpm",
        "Name constants in ALL_CAPS.",
        "Add the copyright header to every new file.",
        "Follow the Conventional Commits specification for commit messages.",
        "After every change, run the tests.",  # "the tests" is how rules speak too
    ],
)
def test_a_text_a_guard_compiles_from_is_a_rule(text: str) -> None:
    assert guards_in_general(read(text)), text
    assert detect_offline(read(text)).is_correction, text


@pytest.mark.parametrize(
    "text",
    [
        "Add type hints to `utils.py`",  # one file
        "Commit the changes with a conventional commit message",  # this work
        "Fix this file's imports, then run `ruff check .` before committing",
        "Update the changelog",  # no guard
    ],
)
def test_requests_stay_requests(text: str) -> None:
    assert not guards_in_general(read(text)), text
