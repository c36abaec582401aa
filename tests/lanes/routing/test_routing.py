"""Detector, clusters and allocator sanity on a few rows (the bench scores the rest)."""

from __future__ import annotations

import pytest

from continual_lsp.config import Settings
from continual_lsp.lanes.reading import Situation, read
from continual_lsp.lanes.routing.allocator import allocate, route_correction
from continual_lsp.lanes.routing.clusters import assign_cluster
from continual_lsp.lanes.routing.detector import detect


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Always use `pnpm`, never `npm` or `yarn`", True),
        ("Keep changes focused — avoid over-engineering", True),
        ("Kotlin with Jetpack Compose, Koin for DI, Room for local storage", True),
        ("Explain the main entry point of this codebase", False),
        ("Refactor this FastAPI route to return JSON", False),
        ("Help me debug this error message", False),
    ],
)
def test_detector(embedder, text: str, expected: bool) -> None:
    assert detect(read(text), embedder=embedder).is_correction is expected


def test_denial_is_a_correction_by_construction(embedder) -> None:
    det = detect(read("Help me debug this error message"), denial=True, embedder=embedder)
    assert det.is_correction and det.source == "denial" and det.confidence == 1.0


@pytest.mark.parametrize(
    ("text", "lane"),
    [
        ("**Always use `pnpm`**, never `npm` or `yarn`", "CODE"),
        ("NO CSS files (use Emotion)", "CODE"),
        ("Never modify git config.", "CODE"),
        ("Keep code DRY (Don't Repeat Yourself)", "WEIGHTS"),
        ("Prefer the smallest change that fixes the issue.", "WEIGHTS"),
        ("**Source code**: `src/agents/` contains the implementation.", "CONTEXT"),
        ("Kotlin with Jetpack Compose, Koin for DI, Room for local storage", "CONTEXT"),
    ],
)
def test_allocator_with_recurrence_met(embedder, text: str, lane: str) -> None:
    d = allocate(read(text), 3, Settings(), embedder=embedder, use_llm=False)
    assert d.lane == lane, d.reason
    assert d.reason and 0.0 <= d.confidence <= 1.0


def test_behavioural_rule_waits_for_recurrence(embedder) -> None:
    d = allocate(read("Keep code DRY (Don't Repeat Yourself)"), 1, Settings(), embedder=embedder)
    assert d.lane == "CONTEXT" and "recurs" in d.reason
    d = allocate(
        read("Keep code DRY (Don't Repeat Yourself)"),
        1,
        Settings(weights_recurrence=1),
        embedder=embedder,
    )
    assert d.lane == "WEIGHTS"


def test_clusters_count_recurrence_and_persist_centroid(store, embedder) -> None:
    s = Settings()
    a = assign_cluster(store, "Don't put comments everywhere.", s, embedder=embedder)
    b = assign_cluster(store, "Stop putting comments everywhere", s, embedder=embedder)
    c = assign_cluster(store, "Use pnpm, never npm.", s, embedder=embedder)
    assert a.is_new and not b.is_new and b.cluster_id == a.cluster_id and b.count == 2
    assert c.cluster_id != a.cluster_id
    rows = {r["id"]: r for r in store.clusters()}
    assert rows[a.cluster_id]["count"] == 2
    assert len(rows[a.cluster_id]["centroid"]) == 384 * 4  # float32
    assert rows[a.cluster_id]["label"] == "Don't put comments everywhere."  # shortest member


def test_route_correction_promotes_a_recurring_judgement(store, embedder) -> None:
    s = Settings()
    texts = [
        "Don't add comments everywhere.",
        "Stop putting comments everywhere",
        "Please don't add so many comments everywhere.",
    ]
    items = [
        route_correction(
            store, t, Situation(task_text="fix the bug"), s, denial=True, embedder=embedder
        )
        for t in texts
    ]
    assert items[0].lane == "CONTEXT"
    assert items[2].lane == "WEIGHTS" and items[2].recurrence == 3
    assert items[2].id == items[0].id  # one item per cluster, upgraded in place
    assert len(store.lane_items()) == 1
    # Routed notifications were logged, and not-a-correction is routed nowhere.
    assert store.events(kind="routed")
    assert (
        route_correction(
            store, "Explain the main entry point of this codebase", None, s, embedder=embedder
        )
        is None
    )


def test_same_guard_is_not_added_twice(store, embedder) -> None:
    s = Settings()
    a = route_correction(store, "Use pnpm, never npm.", None, s, denial=True, embedder=embedder)
    b = route_correction(store, "Use pnpm, never npm.", None, s, denial=True, embedder=embedder)
    assert a.lane == "CODE" and a.id == b.id and b.recurrence == 2


def test_one_guard_for_the_same_rule_in_other_words(store, embedder) -> None:
    s = Settings()
    texts = [
        "This project uses pnpm, not npm: run `pnpm add zod`.",
        "This project uses pnpm, not npm: run `pnpm build`.",
    ]
    items = [route_correction(store, t, None, s, denial=True, embedder=embedder) for t in texts]
    assert items[0].lane == "CODE" and items[0].id == items[1].id
    assert len(store.lane_items(active_only=True)) == 1
