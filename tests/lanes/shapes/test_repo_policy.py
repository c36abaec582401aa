"""The policy shapes (dependencies, build modes, git, lockfiles): each compiles from
general rule phrasings (paraphrases, not the dev set's rows), fires on a violating call
and lets a compliant one through."""

from __future__ import annotations

from continual_lsp.lanes.compile import compile_guard
from continual_lsp.lanes.reading import read
from tests.lanes.support import bash, guard_from, write


def test_install_with_the_tool_not_by_editing_the_manifest() -> None:
    guard = guard_from("Always add crates with `cargo add`.")
    assert guard.check(write("Cargo.toml", 'rand = "0.8"\n'), None).action == "block"
    assert guard.check(write("Cargo.toml", 'version = "0.2.0"\n'), None).action == "allow"
    assert guard.check(bash("cargo add rand"), None).action == "allow"


def test_no_new_dependencies_without_approval() -> None:
    guard = guard_from("Ask before adding any new dependency.")
    for cmd in ("npm i -D zod", "cd api && pip install httpx", "poetry add rich", "go get x.io/y"):
        assert guard.check(bash(cmd), None).action == "block", cmd
    for cmd in ("npm install", "npm ci", "pip install -r requirements.txt", "pip install -e ."):
        assert guard.check(bash(cmd), None).action == "allow", cmd
    assert guard.check(write("package.json", '  "zod": "^3.0.0",\n'), None).action == "block"


def test_no_global_installs() -> None:
    guard = guard_from("Do not install anything globally.")
    assert guard.check(bash("npm install -g typescript"), None).action == "block"
    assert guard.check(bash("sudo pip install black"), None).action == "block"
    assert guard.check(bash("npm install -D typescript"), None).action == "allow"


def test_debug_builds() -> None:
    guard = guard_from("Use debug builds during development.")
    assert guard.check(bash("cd app && cargo run --release"), None).action == "block"
    assert guard.check(bash("dotnet build -c Release"), None).action == "block"
    assert guard.check(bash("cargo run"), None).action == "allow"


def test_no_commits_as_a_noun_phrase() -> None:
    guard = guard_from("Review mode: read only, no commits and no pushes.")
    assert guard.check(bash("git add . && git commit -m x"), None).action == "block"
    assert guard.check(bash("git push"), None).action == "block"
    assert guard.check(bash("git diff"), None).action == "allow"
    hooks = compile_guard(read("There are no commit hooks in this repository."))
    assert hooks is None or not any("git\\s+commit" in str(r) for r in hooks.rules)


def test_commit_subject_length_and_body() -> None:
    guard = guard_from("Keep the commit summary under 50 characters; single-line commits only.")
    assert guard.check(bash(f"git commit -m '{'a' * 51}'"), None).action == "block"
    assert guard.check(bash("git commit -m 'fix: x\n\ndetails'"), None).action == "block"
    assert guard.check(bash("git commit -m 'fix: parse dates'"), None).action == "allow"


def test_imperative_mood_is_a_judgement() -> None:
    assert compile_guard(read("Write commit messages in the imperative mood.")) is None


def test_lockfiles_are_not_edited_by_hand() -> None:
    guard = guard_from("Never modify the lockfile manually.")
    assert guard.check(write("web/pnpm-lock.yaml"), None).action == "block"
    assert guard.check(write("web/package.json"), None).action == "allow"


def test_a_dependency_rule_with_an_exception_is_a_judgement() -> None:
    assert compile_guard(read("Avoid adding dependencies unless they pull their weight.")) is None


def test_a_commit_message_that_starts_with_a_gitmoji() -> None:
    guard = guard_from("Every commit message starts with a gitmoji.")
    assert guard.check(bash("git commit -m 'fix login'"), None).action == "block"
    assert guard.check(bash("git commit -m ':bug: fix login'"), None).action == "allow"
