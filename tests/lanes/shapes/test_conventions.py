"""The convention shapes: each compiles from general rule phrasings (paraphrases, not the
dev set's rows), fires on a violating call and lets a compliant one through."""

from __future__ import annotations

import pytest

from continual_lsp.lanes.compile import compile_guard
from continual_lsp.lanes.guards.guard_set import Guard
from continual_lsp.lanes.guards.spec import KeepRule
from continual_lsp.lanes.reading import read
from continual_lsp.lanes.shapes import Probe, fires
from continual_lsp.lanes.shapes.conventions import CONVENTION_SHAPES, _edit
from continual_lsp.lanes.shapes.repo_policy import POLICY_SHAPES
from continual_lsp.tools.base import ToolCall
from tests.lanes.support import bash, blocks_then_allows, guard_from, write


def verdict(guard: Guard, s: Probe) -> str:
    return guard.check(s.call, s.preview, s.history).action


def test_every_convention_shape_passes_its_own_self_check() -> None:
    texts = [
        "`CHANGELOG.md` is append-only.",
        "Never remove `# pragma: no cover`.",
        "Always pair `aria-label` with `role`.",
        "Use `cargo add` to add dependencies.",
        "Don't add new dependencies without asking.",
        "Never install packages globally.",
        "Constants must be UPPER_SNAKE_CASE.",
        "Prefix booleans with `is` or `has`.",
        "Lines must not exceed 100 characters.",
        "Use `<-` for assignment, never `=` (R).",
        "Use expression-bodied members for one-line getters in C#.",
        "Always use absolute imports, never relative imports.",
        "No direct HTTP calls (axios/node-fetch) in components.",
        "Prefer debug builds while iterating.",
        "Read-only mode: no commits, no pushes.",
        "Keep commit subject lines under 72 characters.",
        "Never edit a lock file by hand.",
    ]
    for text in texts:
        shaped = [s for shape in (*CONVENTION_SHAPES, *POLICY_SHAPES) for s in shape(text)]
        assert shaped, text
        assert all(fires(s) for s in shaped), text


# -- lines a change keeps -------------------------------------------------------------------


def test_append_only_file_takes_appends_only() -> None:
    guard = guard_from("`CHANGELOG.md` is append-only: never rewrite old entries.")
    before = "## 1.0\n- first\n"
    assert verdict(guard, _edit("CHANGELOG.md", "- first\n", "- first\n- second\n", before)) == (
        "allow"
    )
    assert verdict(guard, _edit("CHANGELOG.md", "- first\n", "- 1st\n", before)) == "block"
    assert verdict(guard, _edit("docs/other.md", "- first\n", "- 1st\n", before)) == "allow"
    assert guard.check(bash("echo '- x' >> CHANGELOG.md"), None).action == "allow"
    assert guard.check(bash("echo '' > CHANGELOG.md"), None).action == "block"
    assert guard.check(bash("cd docs && rm CHANGELOG.md"), None).action == "block"


def test_a_named_token_must_not_change() -> None:
    guard = guard_from('`"strict": true` must not be changed.')
    before = '{\n  "strict": true,\n  "target": "es2020"\n}\n'
    loosened = _edit("tsconfig.json", '"strict": true', '"strict": false', before)
    retarget = _edit("tsconfig.json", '"es2020"', '"es2022"', before)
    assert verdict(guard, loosened) == "block"
    assert verdict(guard, retarget) == "allow"
    # Without a preview an edit's own old/new text is read.
    old_new = ToolCall(
        tool="edit",
        arguments={"path": "tsconfig.json", "old": '"strict": true', "new": '"strict": false'},
    )
    assert guard.check(old_new, None).action == "block"


def test_paths_and_commands_are_not_kept_tokens() -> None:
    assert not [s for s in CONVENTION_SHAPES[0]("Never remove `src/legacy.py`.")]


def test_co_requirement_on_one_line() -> None:
    guard = guard_from('`target="_blank"` requires `rel="noopener"`.')
    assert guard.check(write("a.html", '<a target="_blank" href="/x">x</a>\n'), None).action == (
        "block"
    )
    ok = '<a target="_blank" rel="noopener" href="/x">x</a>\n'
    assert guard.check(write("a.html", ok), None).action == "allow"


# -- identifiers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "bad", "good"),
    [
        (
            "Use SCREAMING_SNAKE_CASE for constants.",
            ("src/limits.ts", "export const maxRetries = 3;\n"),
            ("src/limits.ts", "export const MAX_RETRIES = 3;\n"),
        ),
        (
            "Constants are UPPER_CASE.",
            ("pkg/limits.py", "max_retries = 3\n"),
            ("pkg/limits.py", "MAX_RETRIES = 3\n__version__ = '1.0'\n"),
        ),
        (
            "Use camelCase for functions and variables.",
            ("src/a.js", "function load_user() {}\n"),
            ("src/a.js", "function loadUser() {}\nconst API_URL = 'x';\n"),
        ),
        (
            "Classes and interfaces use PascalCase.",
            ("src/a.ts", "interface userProps {}\n"),
            ("src/a.ts", "interface UserProps {}\n"),
        ),
        (
            "Python functions should be in snake_case.",
            ("pkg/a.py", "def loadUser():\n    pass\n"),
            ("pkg/a.py", "def load_user():\n    pass\n\ndef __init__(self):\n    pass\n"),
        ),
    ],
)
def test_identifier_naming(text: str, bad: tuple[str, str], good: tuple[str, str]) -> None:
    blocks_then_allows(text, bad, good)


def test_boolean_prefix() -> None:
    guard = guard_from("Boolean variables must start with `is`, `has` or `should`.")
    assert guard.check(write("src/a.ts", "const visible = true;\n"), None).action == "block"
    assert guard.check(write("src/a.ts", "const isVisible = true;\n"), None).action == "allow"
    assert guard.check(write("app/a.py", "enabled = False\n"), None).action == "block"
    assert guard.check(write("app/a.py", "has_access = False\n"), None).action == "allow"


# -- lines, operators, imports --------------------------------------------------------------------


def test_line_formatting() -> None:
    length = guard_from("Keep lines under 80 characters in Python.")
    assert length.check(write("a.py", "x" * 81 + "\n"), None).action == "block"
    assert length.check(write("a.py", "x" * 80 + "\n"), None).action == "allow"
    trailing = guard_from("No trailing whitespace.")
    assert trailing.check(write("a.go", "x := 1 \n"), None).action == "block"
    assert trailing.check(write("a.go", "x := 1\n"), None).action == "allow"
    newline = guard_from("Every file must end with a newline.")
    assert newline.check(write("a.rs", "fn main() {}"), None).action == "block"
    assert newline.check(write("a.rs", "fn main() {}\n"), None).action == "allow"
    todo = guard_from("Never leave TODO comments in code.")
    assert todo.check(write("a.py", "x = 1  # TODO\n"), None).action == "block"
    assert todo.check(write("a.py", "x = 1\n"), None).action == "allow"
    semis = guard_from("Don't use semicolons.")
    assert semis.check(write("a.ts", "const a = 1;\n"), None).action == "block"
    assert semis.check(write("a.ts", "const a = 1\n"), None).action == "allow"


def test_todo_with_an_exception_is_not_compiled() -> None:
    assert compile_guard(read("Never leave a TODO without an issue link.")) is None


def test_assignment_operator() -> None:
    guard = guard_from("In R, use `<-` for assignment, not `=`.")
    assert guard.check(write("analysis.R", "total = sum(x)\n"), None).action == "block"
    assert guard.check(write("analysis.R", "total <- sum(x, na.rm = TRUE)\n"), None).action == (
        "allow"
    )


def test_expression_bodied_getters() -> None:
    guard = guard_from("Use expression bodies for simple getters.")
    block = "String get label {\n  return _label;\n}\n"
    assert guard.check(write("lib/a.dart", block), None).action == "block"
    assert guard.check(write("lib/a.dart", "String get label => _label;\n"), None).action == "allow"


def test_relative_imports() -> None:
    none = guard_from("Always use absolute imports.")
    assert none.check(write("app/a.py", "from .models import User\n"), None).action == "block"
    assert none.check(write("app/a.py", "from app.models import User\n"), None).action == "allow"
    deep = guard_from("No relative imports beyond the parent directory (`../../`).")
    assert deep.check(write("src/a/b.ts", "import x from '../../x';\n"), None).action == "block"
    assert deep.check(write("src/a/b.ts", "import x from '../x';\n"), None).action == "allow"


def test_advice_about_imports_is_not_compiled() -> None:
    assert compile_guard(read("Use absolute imports with path aliases for readability.")) is None


def test_no_library_access_in_a_kind_of_folder() -> None:
    guard = guard_from("No direct database access (`prisma`/`pg`) in pages — use the services.")
    assert guard.check(write("src/pages/home.ts", "import { x } from 'pg';\n"), None).action == (
        "block"
    )
    assert guard.check(write("src/services/db.ts", "import { x } from 'pg';\n"), None).action == (
        "allow"
    )


def test_keep_rule_without_globs_ignores_bash() -> None:
    guard = guard_from("Never remove `// @ts-check`.")
    assert isinstance(guard.spec.rules[0], KeepRule)
    assert guard.check(bash("rm -rf dist"), None).action == "allow"


@pytest.mark.parametrize(
    ("text", "bad", "good"),
    [
        (
            "Name constants in ALL_CAPS.",
            ("src/a.ts", "const timeoutMs = 500;\n"),
            ("src/a.ts", "const TIMEOUT_MS = 500;\n"),
        ),
        (
            "Use PascalCase for React component names.",
            ("src/nav.tsx", "export function navBar() {\n  return null;\n}\n"),
            ("src/nav.tsx", "export function NavBar() {\n  return null;\n}\n"),
        ),
        (
            "Use snake_case for Python function and variable names.",
            ("pkg/a.py", "def loadUser():\n    pass\n"),
            ("pkg/a.py", "def load_user():\n    pass\n"),
        ),
    ],
)
def test_identifier_naming_more_phrasings(
    text: str, bad: tuple[str, str], good: tuple[str, str]
) -> None:
    blocks_then_allows(text, bad, good)


def test_component_naming_spares_hooks() -> None:
    guard = guard_from("Exported components must use PascalCase names.")
    hook = "export function useAuth() {\n  return null;\n}\n"
    assert guard.check(write("src/auth.tsx", hook), None).action == "allow"


@pytest.mark.parametrize(
    ("text", "bad", "good"),
    [
        (
            "Never use global variables in Python.",
            ("app/a.py", "def bump():\n    global hits\n    hits += 1\n"),
            ("app/a.py", "def bump(hits):\n    return hits + 1\n"),
        ),
        (
            "No new globals.",
            ("src/a.js", "window.store = makeStore();\n"),
            ("src/a.js", "export const store = makeStore();\n"),
        ),
        (
            "No new globals.",
            ("mod/init.lua", "cache = {}\n"),
            ("mod/init.lua", "local cache = {}\n"),
        ),
    ],
)
def test_no_globals(text: str, bad: tuple[str, str], good: tuple[str, str]) -> None:
    blocks_then_allows(text, bad, good)


def test_global_state_advice_is_not_compiled() -> None:
    assert compile_guard(read("Avoid global state.")) is None


def test_several_cases_in_one_line_bind_to_their_own_kinds() -> None:
    guard = guard_from("**Naming**: constants in `SCREAMING_SNAKE_CASE`, functions in `camelCase`.")
    ok = "export const MAX_SIZE = 10;\nfunction loadUser() {}\n"
    assert guard.check(write("src/a.ts", ok), None).action == "allow"
    assert guard.check(write("src/a.ts", "export const maxSize = 10;\n"), None).action == "block"
    assert guard.check(write("src/a.ts", "function load_user() {}\n"), None).action == "block"


def test_the_parent_path_named_in_a_prohibition() -> None:
    guard = guard_from("Never import from `../../` — use path aliases.")
    assert guard.check(write("src/a/b.ts", "import x from '../../x';\n"), None).action == "block"
    assert guard.check(write("src/a/b.ts", "import x from '@/x';\n"), None).action == "allow"


def test_enum_values_are_not_enum_names() -> None:
    spec = compile_guard(read("Enum values should be UPPER_SNAKE_CASE."))
    if spec is not None:  # nothing compiles for members; an enum's own name is free
        guard = Guard("g", spec)
        assert guard.check(write("src/a.ts", "enum Color {}\n"), None).action == "allow"


def test_upper_camel_case_is_pascal() -> None:
    guard = guard_from("Classes use upper camel case.")
    assert guard.check(write("src/a.ts", "class userStore {}\n"), None).action == "block"
    assert guard.check(write("src/a.ts", "class UserStore {}\n"), None).action == "allow"


def test_the_verb_go_names_no_language() -> None:
    guard = guard_from("Lines must never go over 100 characters.")
    assert guard.check(write("src/a.py", "x" * 101 + "\n"), None).action == "block"
