from __future__ import annotations

from continual_lsp.config import Settings
from continual_lsp.lanes.context import Cue, bullets_for_turn, count_tokens, cue_matches, make_cue
from continual_lsp.lanes.reading import read
from continual_lsp.lanes.routing.allocator import route_correction
from continual_lsp.tools.base import ToolCall


def test_cue_from_text() -> None:
    cue = make_cue(read("**Summarize planned edits** before touching Go source files."))
    assert "*.go" in cue.paths
    cue = make_cue(read("The package lives in `src/calc`; tests are in `tests/`."))
    assert "tests/**" in cue.paths and "calc" in cue.words
    cue = make_cue(read("Commit messages should be concise."))
    assert "bash" in cue.tools and "commit" in cue.words


def test_cue_matching() -> None:
    go = Cue(paths=["*.go"])
    assert cue_matches(go, "fix it", [ToolCall(tool="read", arguments={"path": "cmd/main.go"})])
    assert not cue_matches(go, "fix it", [ToolCall(tool="read", arguments={"path": "README.md"})])
    assert cue_matches(go, "fix it", recent_paths=["pkg/x.go"])
    words = Cue(words=["commit", "messag"])
    assert cue_matches(words, "Commit the fix")
    assert cue_matches(
        words, "tidy up", [ToolCall(tool="bash", arguments={"cmd": "git commit -m x"})]
    )
    assert not cue_matches(words, "Read the README")
    assert cue_matches(Cue(always=True), "anything")
    # A bare tool cue decides only when nothing more specific exists.
    assert cue_matches(Cue(tools=["bash"]), "x", [ToolCall(tool="bash", arguments={"cmd": "ls"})])
    assert not cue_matches(
        Cue(tools=["bash"], words=["docker"]), "x", [ToolCall(tool="bash", arguments={"cmd": "ls"})]
    )


def test_bullets_for_turn_injects_only_matching_and_counts(store, embedder) -> None:
    s = Settings()
    route_correction(
        store,
        "The package lives in src/calc; tests are in tests/.",
        None,
        s,
        denial=True,
        embedder=embedder,
    )
    route_correction(
        store,
        "Commit messages should be concise and written in the imperative mood.",
        None,
        s,
        denial=True,
        embedder=embedder,
    )
    route_correction(
        store, "Use pnpm, never npm.", None, s, denial=True, embedder=embedder
    )  # a guard: no bullet
    b = bullets_for_turn(
        store, "Commit the fix", [ToolCall(tool="bash", arguments={"cmd": "git status"})]
    )
    assert b == ["Commit messages should be concise and written in the imperative mood."]
    carried = store.counter("context_tokens")
    notes = store.counter("notes_only_tokens")
    assert carried == count_tokens("- " + b[0])
    assert notes > carried  # the notes-only agent carries all three corrections
    b2 = bullets_for_turn(
        store, "Add a test", [ToolCall(tool="read", arguments={"path": "src/calc/ops.py"})]
    )
    assert b2 == ["The package lives in src/calc; tests are in tests/."]
    assert store.counter("context_calls") == 2


def test_tokenizer_callable_is_used(store, embedder) -> None:
    route_correction(
        store,
        "Kotlin with Jetpack Compose, Koin for DI",
        None,
        Settings(),
        denial=True,
        embedder=embedder,
    )
    bullets_for_turn(store, "add a Koin module", tokenizer=lambda text: [0] * 7)
    assert store.counter("context_tokens") == 7
    assert store.counter("notes_only_tokens") == 7
    assert count_tokens("a b c") == 4  # whitespace estimate: ceil(3 * 1.3)
