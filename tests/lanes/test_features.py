"""The handcrafted features the learned heads read next to the embedding."""

from __future__ import annotations

import pytest

from continual_lsp.lanes.features import FEATURE_NAMES, instructs
from continual_lsp.lanes.reading import read
from continual_lsp.lanes.routing.embed import get_embedder
from continual_lsp.lanes.routing.learned import featurize


def feature(text: str, name: str) -> float:
    return float(read(text).features[FEATURE_NAMES.index(name)])


def test_one_value_per_named_feature() -> None:
    assert read("Use pnpm.").features.shape == (len(FEATURE_NAMES),)
    assert featurize(["Use pnpm."]).shape == (1, get_embedder().dim + len(FEATURE_NAMES))


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Wrap handlers in `withRetry()` calls", "identifier_span"),
        ("Use `serde_json::Value` for untyped payloads", "identifier_span"),
        ("Charts are drawn with Recharts and TanStack Table", "proper_nouns"),
        ("We use Postgres for every service", "we_use"),
        ("`make docs` - builds the site", "glossary_line"),
        ("**Storage:** blobs go to the bucket", "glossary_line"),
        ("The worker reads jobs from the queue", "descriptive_start"),
        ("Don't add features unless the user asked", "user_words"),
        ("Target Node 20", "digits"),
        ("Use `settings.toml` for defaults", "non_command_spans"),
    ],
)
def test_a_feature_fires_on_its_shape(text: str, name: str) -> None:
    assert feature(text, name) > 0, (text, name)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Use `npm test` to check", "identifier_span"),
        ("Keep functions short", "proper_nouns"),
        ("Keep functions short", "we_use"),
        ("**Tests**: Run them before every push", "glossary_line"),  # a title over a rule
        ("Keep functions short", "descriptive_start"),
        ("Keep functions short", "digits"),
        ("Run `npm test` first", "non_command_spans"),
    ],
)
def test_a_feature_stays_off_elsewhere(text: str, name: str) -> None:
    assert feature(text, name) == 0, (text, name)


def test_instructs_reads_imperatives_and_modals() -> None:
    assert instructs("Use the shared client")
    assert instructs("Errors must be logged")
    assert not instructs("Defaults live in conf/")
