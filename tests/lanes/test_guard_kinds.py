"""Every guard kind fires on a violating call and lets a compliant one through.

The guards are compiled from rule text where a rule's shape is what is under test, and
built from specs where the evaluation is.
"""

from __future__ import annotations

import pytest

from continual_lsp.lanes.compile import compile_guard
from continual_lsp.lanes.guards.commands import command_segments, commit_messages
from continual_lsp.lanes.guards.guard_set import Guard, GuardSet
from continual_lsp.lanes.guards.spec import CommandRule, GuardSpec, PathRule, SequenceRule, ToolRule
from continual_lsp.lanes.reading import read
from continual_lsp.lanes.shapes import Probe, Shaped, fires, synthesise
from continual_lsp.tools.base import ToolCall
from tests.lanes.support import bash, blocks_then_allows, guard_from, write

# -- command policy: compound commands ---------------------------------------------------------


@pytest.mark.parametrize(
    ("cmd", "segments"),
    [
        ("cd x && npm i", ["cd x", "npm i"]),
        ("FOO=1 npm test", ["npm test"]),
        ("pnpm test | tee log", ["pnpm test", "tee log"]),
        ("npm test; git push -f", ["npm test", "git push -f"]),
        ("sudo -E npm i", ["npm i"]),
        ("(cd a && make) || echo 'a && b'", ["cd a", "make", "echo 'a && b'"]),
        ("npx tsc --noEmit", ["npx tsc --noEmit", "tsc --noEmit"]),
        ("pnpm dlx tsc", ["pnpm dlx tsc", "tsc"]),
    ],
)
def test_command_segments(cmd: str, segments: list[str]) -> None:
    assert command_segments(cmd) == segments


def test_unparseable_command_is_still_split() -> None:
    assert command_segments('echo "open && npm i')[-1] == "npm i"


def test_deny_judges_every_segment() -> None:
    guard = Guard("g", GuardSpec(message="no npm", rules=[CommandRule(pattern=r"^npm\b")]))
    for cmd in ("cd x && npm i", "FOO=1 npm test", "sudo npm i", "(npm ci)"):
        assert guard.check(bash(cmd), None).action == "block", cmd
    assert guard.check(bash("pnpm i && echo npm"), None).action == "allow"


def test_force_push_in_any_segment_from_text() -> None:
    guard = guard_from("Never force-push.")
    assert guard.check(bash("npm test; git push -f"), None).action == "block"
    assert guard.check(bash("npm test; git push"), None).action == "allow"


def test_piped_command_is_judged() -> None:
    guard = guard_from("Never run `pnpm test` here; use `pnpm test:ci`.")
    assert guard.check(bash("pnpm test | tee log"), None).action in ("block", "rewrite")
    assert guard.check(bash("pnpm lint | tee log"), None).action == "allow"


def test_package_runners_are_seen_through() -> None:
    guard = guard_from("NEVER run bare `tsc` - always use `yarn typecheck`.")
    assert guard.check(bash("npx tsc --noEmit"), None).action in ("block", "rewrite")
    assert guard.check(bash("pnpm dlx tsc"), None).action in ("block", "rewrite")
    assert guard.check(bash("yarn typecheck"), None).action == "allow"


def test_deny_wins_over_a_rewrite() -> None:
    rewrite = Guard(
        "r",
        GuardSpec(
            message="pnpm", rules=[CommandRule(pattern=r"(^|&&\s*)npm\b", replace=r"\1pnpm")]
        ),
    )
    deny = Guard("d", GuardSpec(message="no push", rules=[CommandRule(pattern=r"\bgit\s+push\b")]))
    verdict = GuardSet([rewrite, deny]).check(bash("npm test && git push"))
    assert verdict.action == "block" and verdict.guard_id == "d"


# -- path scope ---------------------------------------------------------------------------------


def test_path_scope_from_text() -> None:
    guard = guard_from(
        "`src/components/ui/` holds generated shadcn components — do not hand-edit these."
    )
    assert guard.check(write("src/components/ui/button.tsx"), None).action == "block"
    assert guard.check(write("src/components/nav.tsx"), None).action == "allow"


@pytest.mark.parametrize(
    ("text", "forbidden", "allowed"),
    [
        (
            "Never edit files under third_party/; make the change in our own code under lib/.",
            "third_party/x/core.py",
            "lib/app/core.py",
        ),
        ("Do not modify `dist/`; it is built from `web/`.", "dist/app.js", "web/app.js"),
    ],
)
def test_the_path_a_prohibition_names_is_the_one_forbidden(
    text: str, forbidden: str, allowed: str
) -> None:
    """The other clause names where the change belongs: blocking it too would stop every
    compliant change (it did: the last path of the text was taken)."""
    guard = guard_from(text)
    assert guard.check(write(forbidden), None).action == "block"
    assert guard.check(write(allowed), None).action == "allow"


def test_path_allow_mode_and_bash_writes() -> None:
    only = Guard(
        "g", GuardSpec(message="only docs", rules=[PathRule(globs=["docs/**"], mode="allow")])
    )
    assert only.check(write("src/a.py"), None).action == "block"
    assert only.check(write("docs/a.md"), None).action == "allow"
    never = Guard("g", GuardSpec(message="not vendor", rules=[PathRule(globs=["vendor/**"])]))
    assert never.check(bash("rm -rf vendor/lib"), None).action == "block"
    assert never.check(bash("ls vendor/lib"), None).action == "allow"


# -- content on added lines ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "bad", "good"),
    [
        (
            "Use named exports only — no default exports",
            ("src/a.ts", "export default 1\n"),
            ("src/a.ts", "export const a = 1\n"),
        ),
        (
            "No emojis in code or commits.",
            ("src/a.py", "ok = '\u2705'\n"),
            ("src/a.py", "ok = 'yes'\n"),
        ),
        (
            "Never leave console.log in committed code.",
            ("src/a.js", "console.log(x)\n"),
            ("src/a.js", "log.debug(x)\n"),
        ),
        (
            "Do not use print() for diagnostics; use the logger.",
            ("a.py", "print('x')\n"),
            ("a.py", "log.info('x')\n"),
        ),
        (
            "Remove debugger statements; never commit `debugger`.",
            ("a.js", "debugger;\n"),
            ("a.js", "x();\n"),
        ),
        ("4-space indentation, no tabs", ("a.py", "if x:\n\ty()\n"), ("a.py", "if x:\n    y()\n")),
        (
            "`client/` never imports `server/`",
            ("client/a.ts", "import { db } from '../server/db';\n"),
            ("client/a.ts", "import { x } from './x';\n"),
        ),
        (
            "Never import `openai` directly; all LLM calls go through `core/llm_client.py`.",
            ("agents/a.py", "import openai\n"),
            ("agents/a.py", "from core import llm_client\n"),
        ),
        (
            'Every new file must start with "SPDX-License-Identifier: MIT".',
            ("src/a.py", "x = 1\n"),
            ("src/a.py", "# SPDX-License-Identifier: MIT\nx = 1\n"),
        ),
        # Conventions of languages and frameworks (paraphrases, not the dev set's rows).
        (
            "All public functions must have docstrings.",
            ("pkg/m.py", "def area(r):\n    return r * r\n"),
            ("pkg/m.py", 'def area(r):\n    """Area."""\n    return r * r\n'),
        ),
        (
            "Document every exported function with JSDoc.",
            ("src/m.ts", "export function area(r) {\n  return r;\n}\n"),
            ("src/m.ts", "/**\n * Area.\n */\nexport function area(r) {\n  return r;\n}\n"),
        ),
        (
            "Always add type hints to new Python functions.",
            ("pkg/m.py", "def area(r):\n    return r\n"),
            ("pkg/m.py", "def area(r: float) -> float:\n    return r\n"),
        ),
        (
            "Only write function components; no class components.",
            ("src/Nav.tsx", "export class Nav extends Component {}\n"),
            ("src/Nav.tsx", "export function Nav() {\n  return null;\n}\n"),
        ),
        (
            "Omit parentheses around a single arrow function parameter.",
            ("src/m.js", "items.map((item) => item.id);\n"),
            ("src/m.js", "items.map(item => item.id);\n"),
        ),
        (
            "Prefer interfaces over type aliases for object types.",
            ("src/t.ts", "export type User = {\n  id: string;\n};\n"),
            ("src/t.ts", "export interface User {\n  id: string;\n}\n"),
        ),
        (
            "Never force-unwrap optionals.",
            ("App/View.swift", "let u = user!\n"),
            ("App/View.swift", "guard let u = user else { return }\n"),
        ),
        (
            "Don't hardcode UI strings; every label goes through i18n.",
            ("src/Login.jsx", "<button>Sign in</button>\n"),
            ("src/Login.jsx", "<button>{t('signIn')}</button>\n"),
        ),
        (
            "Never hard-code colors; take them from the theme.",
            ("src/Badge.ts", "const c = '#1e90ff';\n"),
            ("src/Badge.ts", "const c = theme.palette.primary;\n"),
        ),
        (
            "`fmt.Println` is for scripts; services use the structured logger.",
            ("svc/main.go", 'fmt.Println("started")\n'),
            ("svc/main.go", 'logger.Info("started")\n'),
        ),
        (
            "Every source file must carry a license header.",
            ("src/m.rs", "fn main() {}\n"),
            ("src/m.rs", "// Copyright 2026 The Authors\nfn main() {}\n"),
        ),
        (
            "Comments in the code are written in English.",
            ("src/m.ts", "const n = 1; // 计数器\n"),
            ("src/m.ts", "const n = 1; // counter\n"),
        ),
        (
            "Private members must be prefixed with an underscore.",
            ("src/Cache.cs", "private readonly int size;\n"),
            ("src/Cache.cs", "private readonly int _size;\n"),
        ),
        (
            "Use the `httpx` library, not requests.",
            ("app/client.py", "import requests\n"),
            ("app/client.py", "import httpx\n"),
        ),
    ],
)
def test_content_shapes(text: str, bad: tuple[str, str], good: tuple[str, str]) -> None:
    blocks_then_allows(text, bad, good)


def test_named_markup_tags() -> None:
    guard = guard_from("Use the `picture.twig` include for all images — don't use raw `<img>` tags")
    assert guard.check(write("templates/a.twig", '<img src="a.png">\n'), None).action == "block"
    assert (
        guard.check(write("templates/a.twig", "{% include 'picture.twig' %}\n"), None).action
        == "allow"
    )
    inline = guard_from("Do not add inline `<script>` tags in `index.html`.")
    assert inline.check(write("index.html", "<script>go()</script>\n"), None).action == "block"
    assert (
        inline.check(write("index.html", '<script src="app.js"></script>\n'), None).action
        == "allow"
    )


def test_the_named_path_of_several_is_guarded() -> None:
    guard = guard_from(
        "**Components**: `src/components/` (app), `src/components/ui/` (shadcn/ui — do not hand-edit these)"
    )
    assert guard.check(write("src/components/ui/button.tsx"), None).action == "block"
    assert guard.check(write("src/components/nav.tsx"), None).action == "allow"


def test_naming_convention_of_new_files() -> None:
    guard = guard_from(
        "Use lowercase with dashes for directory names (e.g., `components/auth-wizard`)."
    )
    assert guard.check(write("src/AuthWizard/index.ts"), None).action == "block"
    assert guard.check(write("src/auth-wizard/index.ts"), None).action == "allow"
    snake = guard_from("Python file names use snake_case.")
    assert snake.check(write("pkg/makeDataset.py"), None).action == "block"
    assert snake.check(write("pkg/make_dataset.py"), None).action == "allow"


# -- git policy -----------------------------------------------------------------------------------


def test_commit_messages_are_read_from_every_m() -> None:
    assert commit_messages("git add . && git commit -am 'feat: x' -m body") == ["feat: x", "body"]
    assert commit_messages("git status") == []


def test_conventional_commits() -> None:
    guard = guard_from("Commit messages follow Conventional Commits.")
    assert guard.check(bash("git add -A && git commit -m 'updated things'"), None).action == "block"
    assert guard.check(bash("git commit -m 'fix(api): handle empty body'"), None).action == "allow"
    assert guard.check(bash("git status"), None).action == "allow"


def test_no_commit_and_never_commit_files() -> None:
    guard = guard_from(
        "Never commit, push, or open a pull request unless the user explicitly asks."
    )
    assert guard.check(bash("npm test && git commit -m 'fix: x'"), None).action == "block"
    assert guard.check(bash("git diff"), None).action == "allow"
    files = guard_from("Do not commit `.env` files.")
    assert files.check(bash("git add .env"), None).action == "block"
    assert files.check(bash("git add src/app.py"), None).action == "allow"


def test_no_agent_attribution_in_commit_message() -> None:
    guard = guard_from("**Never** add `Co-Authored-By:` or any agent attribution to commits.")
    assert (
        guard.check(bash("git commit -m 'fix: x\n\nCo-Authored-By: bot'"), None).action == "block"
    )
    assert guard.check(bash("git commit -m 'fix: x'"), None).action == "allow"


# -- sequence ---------------------------------------------------------------------------------------


def test_after_a_change_run_the_formatter_before_commit() -> None:
    guard = guard_from("Run `gofmt` on any Go file you edit.")
    commit = bash("git commit -m 'fix: x'")
    changed = [write("cmd/main.go")]
    verdict = guard.check(commit, None, changed)
    assert verdict.action == "block" and "gofmt" in verdict.message
    assert guard.check(commit, None, [*changed, bash("gofmt -w cmd/main.go")]).action == "allow"
    # A change after the step makes it due again; a change elsewhere does not.
    assert (
        guard.check(commit, None, [*changed, bash("gofmt -w ."), write("a.go")]).action == "block"
    )
    assert guard.check(commit, None, [write("README.md")]).action == "allow"


def test_before_commit_run_the_check_and_missing_steps_at_finish() -> None:
    guard = guard_from("Before every commit: run `composer check` and stage any resulting changes.")
    history = [write("src/A.php")]
    assert guard.check(bash("git commit -m 'fix: a'"), None, history).action == "block"
    assert (
        guard.check(bash("git commit -m 'fix: a'"), None, [*history, bash("composer check")]).action
        == "allow"
    )
    assert GuardSet([guard]).missing_steps(history) == [("g", "composer check")]
    assert GuardSet([guard]).missing_steps([*history, bash("composer check")]) == []


def test_sequence_without_history_does_not_block() -> None:
    rule = SequenceRule(command=r"\bmake test\b", step="make test")
    assert (
        Guard("g", GuardSpec(message="m", rules=[rule])).check(bash("git commit -m x"), None).action
        == "allow"
    )


# -- the compiler decides ----------------------------------------------------------------------------


def test_self_check_drops_a_guard_that_blocks_compliant_code() -> None:
    # "never `=`" compiles to a content rule on `=`, which also blocks `:=`: not kept.
    spec = compile_guard(read("Use `:=` for ALL assignments (never `=`)"))
    assert spec is None or all(r.kind != "content" or r.pattern != "=" for r in spec.rules)


def test_synthesised_situations() -> None:
    shaped = synthesise(CommandRule(pattern=r"(^|[;&|(]\s*|\bsudo\s+)git\s+push(?![\w-])"))
    assert shaped is not None and fires(shaped)
    broken = Shaped(CommandRule(pattern="."), Probe(bash("git push")), Probe(bash("echo ok")))
    assert not fires(broken)


def test_ordinary_requests_compile_to_nothing() -> None:
    for text in (
        "Write unit tests for the login function",
        "Update the changelog",
        "Run gofmt and go vet",
    ):
        assert compile_guard(read(text)) is None, text


# -- what a decoding grammar can narrow by ------------------------------------------------------------


def test_restrictions() -> None:
    spec = GuardSpec(
        message="m",
        rules=[
            ToolRule(deny=["bash"]),
            PathRule(globs=["vendor/**"]),
            CommandRule(pattern=r"(^|[;&|(]\s*|\bsudo\s+)git\s+push(?![\w-])"),
            CommandRule(pattern=r"(^|[;&|(]\s*|\bsudo\s+)npm(?=\s|$)", replace=r"\g<1>pnpm"),
        ],
    )
    r = spec.restrictions()
    assert r.tools_blocked["bash"] == ["**"]
    assert r.tools_blocked["write"] == ["vendor/**"]
    assert r.path_prefixes_never == ["vendor/"]
    # Only a whole directory becomes a prefix: `vendor/*.py` would forbid vendor/README.md.
    narrow = GuardSpec(message="m", rules=[PathRule(globs=["vendor/*.py"])]).restrictions()
    assert narrow.path_prefixes_never == [] and narrow.tools_blocked["write"] == ["vendor/*.py"]
    assert r.command_prefixes_never == ["git push"]  # a rewrite is not a restriction


def test_no_guard_no_code(embedder) -> None:
    from continual_lsp.lanes.routing.allocator import allocate

    # A coverage bar is checkable in principle (the cue list says so), but no guard
    # compiles from the text: not CODE, and the reason says a guard could be attached.
    d = allocate(
        read("Every pull request MUST have 100% coverage."), 1, use_llm=False, embedder=embedder
    )
    assert d.lane != "CODE" and d.checkable and "no guard compiled" in d.reason
    code = allocate(read("Never force-push."), 1, use_llm=False, embedder=embedder)
    assert code.lane == "CODE" and "command deny" in code.reason and code.spec["rules"]


@pytest.mark.parametrize(
    ("text", "bad", "expected"),
    [
        ("Always use pnpm.", "cd web && npm install", "cd web && pnpm install"),
        ("bun is our package manager", "yarn add zod", "bun add zod"),
        ("Use uv for dependencies.", "pip install httpx", "uv pip install httpx"),
        (
            "Integration tests must run under `dbus-run-session -- pytest tests/it`.",
            "pytest tests/it",
            "dbus-run-session -- pytest tests/it",
        ),
    ],
)
def test_package_managers_and_wrappers_rewrite(text: str, bad: str, expected: str) -> None:
    verdict = guard_from(text).check(bash(bad), None)
    assert verdict.action == "rewrite" and verdict.rewritten_call is not None, text
    assert verdict.rewritten_call.arguments["cmd"] == expected


def test_one_package_manager_that_is_not_drop_in_blocks_the_others() -> None:
    guard = guard_from("Always use yarn, it is the only package manager here.")
    assert guard.check(bash("FOO=1 npm test"), None).action == "block"
    assert guard.check(bash("yarn test"), None).action == "allow"


def test_a_kind_of_file_only_under_its_folder() -> None:
    guard = guard_from("Put all notebooks in the `analysis/` folder.")
    assert guard.check(write("scratch.ipynb"), None).action == "block"
    assert guard.check(write("analysis/scratch.ipynb"), None).action == "allow"
    assert guard.check(write("src/app.py"), None).action == "allow"  # not a notebook


def test_commit_message_language() -> None:
    english = guard_from("Write commit messages in English.")
    assert english.check(bash("git commit -m '修复'"), None).action == "block"
    assert english.check(bash("git commit -m 'fix: x'"), None).action == "allow"
    chinese = guard_from("提交信息 commit message 使用中文")
    assert chinese.check(bash("git commit -m 'fix: x'"), None).action == "block"
    assert chinese.check(bash("git commit -m '修复'"), None).action == "allow"


def test_verify_with_a_command_is_a_step_before_commit() -> None:
    guard = guard_from("Make sure `cargo clippy` passes without warnings.")
    change = write("src/lib.rs")
    commit = bash("git commit -m 'fix: x'")
    assert guard.check(commit, None, [change]).action == "block"
    assert guard.check(commit, None, [change, bash("cargo clippy")]).action == "allow"


def test_never_run_x_via_a_command() -> None:
    guard = guard_from("Never run migrations via `rails db:migrate` in production.")
    assert guard.check(bash("rails db:migrate"), None).action == "block"
    assert guard.check(bash("rails test"), None).action == "allow"


@pytest.mark.parametrize(
    "text",
    [
        "`npm run build` - verify the production build succeeds",  # a glossary line
        "Tests live in `spec/` and use factories",  # a description
        "`docker compose exec web npm run seed` fails inside that container.",
        "Advise the user to use memo for function components that re-render often.",
        "Use `nameof` instead of string literals for member names.",
    ],
)
def test_descriptions_and_advice_compile_to_nothing(text: str) -> None:
    assert compile_guard(read(text)) is None, text


def test_read_first_blocks_changes_until_the_files_are_read() -> None:
    guard = guard_from("Always read `docs/design.md` and ARCHITECTURE.md before changing code.")
    change = write("src/app.py")
    read_design = ToolCall(tool="read", arguments={"path": "docs/design.md"})
    read_arch = ToolCall(tool="read", arguments={"path": "./ARCHITECTURE.md"})
    blocked = guard.check(change, None, [read_design])
    assert blocked.action == "block" and "ARCHITECTURE.md" in blocked.message
    assert guard.check(change, None, [read_design, read_arch]).action == "allow"
    assert guard.check(bash("ls"), None, []).action == "allow"  # reading around is fine
    assert compile_guard(read("The server reads `config.yaml` at start.")) is None


def test_folder_boundary_with_a_noun_and_from() -> None:
    guard = guard_from("The `ui/` package must not import from `db/`.")
    assert guard.check(write("ui/list.ts", "import { q } from '@/db/query';\n"), None).action == (
        "block"
    )
    assert guard.check(write("ui/list.ts", "import { q } from '@/api/query';\n"), None).action == (
        "allow"
    )
    assert guard.check(write("db/x.ts", "import { q } from '../db/query';\n"), None).action == (
        "allow"
    )
    assert len(guard.spec.rules) == 1  # one clause, one rule


def test_never_import_from_a_folder_spares_the_folder_itself() -> None:
    guard = guard_from("Never import from `internal/` outside the package.")
    assert guard.check(write("cmd/a.py", "from app.internal import x\n"), None).action == "block"
    assert guard.check(write("app/internal/b.py", "from internal import x\n"), None).action == (
        "allow"
    )


def test_a_formatter_the_rule_asks_to_ensure() -> None:
    change, commit = write("src/a.py"), bash("git commit -m 'fix: x'")
    for text in ("Ensure code is formatted with black.", "Format all Python with ruff format."):
        guard = guard_from(text)
        assert guard.check(commit, None, [change]).action == "block", text
        step = guard.spec.rules[0].step  # type: ignore[union-attr]
        assert guard.check(commit, None, [change, bash(step)]).action == "allow", text


def test_a_dotted_command_that_must_pass() -> None:
    guard = guard_from("Make sure `ruff check .` passes before you commit.")
    change, commit = write("src/a.py"), bash("git commit -m 'fix: x'")
    assert guard.check(commit, None, [change]).action == "block"
    assert guard.check(commit, None, [change, bash("ruff check .")]).action == "allow"


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("Don't commit build artifacts or node_modules.", "git add node_modules/left-pad"),
        ("Don't commit build artifacts or node_modules.", "git add dist/app.js"),
        ("Never commit secrets or credentials.", "git add certs/server.pem"),
    ],
)
def test_kinds_of_files_never_committed(text: str, bad: str) -> None:
    guard = guard_from(text)
    assert guard.check(bash(bad), None).action == "block"
    assert guard.check(bash("git add src/main.py"), None).action == "allow"


def test_a_kind_of_file_goes_in_its_folder() -> None:
    guard = guard_from("Tests go in `tests/`.")
    assert guard.check(write("src/test_app.py"), None).action == "block"
    assert guard.check(write("tests/test_app.py"), None).action == "allow"
    assert compile_guard(read("Tests live in `spec/` and use factories")) is None


def test_search_tools_are_commands() -> None:
    guard = guard_from("Always use `rg` instead of `grep`.")
    verdict = guard.check(bash("grep foo src"), None)
    assert verdict.action == "rewrite" and verdict.rewritten_call is not None
    assert verdict.rewritten_call.arguments["cmd"] == "rg foo src"
    assert guard.check(write("notes.md", "grep is a tool\n"), None).action == "allow"


@pytest.mark.parametrize(
    ("text", "path", "bad", "good"),
    [
        (
            "The frontend must never import from the backend.",
            "app/frontend/page.ts",
            "import { db } from '../backend/db';\n",
            "import { api } from './api';\n",
        ),
        (
            "`packages/core` must not depend on `packages/web`.",
            "packages/core/a.ts",
            "import { x } from '../../packages/web/x';\n",
            "import { x } from './x';\n",
        ),
        (
            "Domain layer must not import infrastructure code.",
            "src/domain/order.py",
            "from app.infrastructure import repo\n",
            "from app.domain import money\n",
        ),
        (
            "Never import React in server code.",
            "src/server/route.ts",
            "import React from 'react';\n",
            "import { z } from 'zod';\n",
        ),
    ],
)
def test_import_boundaries_in_words(text: str, path: str, bad: str, good: str) -> None:
    guard = guard_from(text)
    assert guard.check(write(path, bad), None).action == "block", text
    assert guard.check(write(path, good), None).action == "allow", text
    assert guard.check(write("elsewhere/x.md", bad), None).action == "allow", text


def test_no_module_named_by_an_article() -> None:
    spec = compile_guard(read("The frontend must never import from the backend."))
    assert spec is not None and "the\\b" not in spec.model_dump_json()


def test_emoji_rule_for_commit_messages_only() -> None:
    guard = guard_from("Never use emojis in commit messages.")
    assert guard.check(bash("git commit -m 'feat: \u2728 login'"), None).action == "block"
    assert guard.check(write("docs/a.md", "Done \u2705\n"), None).action == "allow"


@pytest.mark.parametrize(
    ("text", "bad", "good"),
    [
        ("All commit messages must start with a capital letter.", "fix login", "Fix login"),
        ("Prefix commit messages with the ticket number.", "fix login", "ABC-123: fix login"),
        (
            "Commit messages must follow the format `type(scope): description`.",
            "Login fixed",
            "fix(auth): handle expired tokens",
        ),
    ],
)
def test_commit_message_conventions(text: str, bad: str, good: str) -> None:
    guard = guard_from(text)
    assert guard.check(bash(f"git commit -m '{bad}'"), None).action == "block", text
    assert guard.check(bash(f"git commit -m '{good}'"), None).action == "allow", text


def test_steps_of_unknown_programs_and_when_done() -> None:
    change, commit = write("api/v1/user.proto"), bash("git commit -m 'fix: x'")
    buf = guard_from("After changing any `.proto` file, regenerate the stubs with `buf generate`.")
    assert buf.check(commit, None, [change]).action == "block"
    assert buf.check(commit, None, [change, bash("buf generate")]).action == "allow"
    done = guard_from("Once you are done, run `pnpm typecheck`.")
    assert done.check(commit, None, [write("src/a.ts")]).action == "block"
    assert done.check(commit, None, [write("src/a.ts"), bash("pnpm typecheck")]).action == "allow"


def test_a_folder_that_may_import_only_some_others() -> None:
    guard = guard_from("The `ui/` folder may only import from `core/` and `shared/`.")
    for ok in ("import { a } from '../core/a';\n", "import { b } from '@/shared/b';\n"):
        assert guard.check(write("src/ui/view.ts", ok), None).action == "allow", ok
    assert guard.check(write("src/ui/view.ts", "import { q } from '../db/q';\n"), None).action == (
        "block"
    )
    assert guard.check(write("src/ui/view.py", "from ..db import q\n"), None).action == "block"
    assert guard.check(write("src/db/q.ts", "import { v } from '../ui/v';\n"), None).action == (
        "allow"
    )


def test_a_runner_for_every_command_of_a_program() -> None:
    guard = guard_from("Use `uv run` for all Python commands.")
    verdict = guard.check(bash("cd api && python -m pytest"), None)
    assert verdict.action == "rewrite" and verdict.rewritten_call is not None
    assert verdict.rewritten_call.arguments["cmd"] == "cd api && uv run python -m pytest"
    assert guard.check(bash("uv run python -m pytest"), None).action == "allow"


def test_more_phrasings_of_headers_formats_and_triggers() -> None:
    header = guard_from("Start every file with a copyright notice.")
    assert header.check(write("src/a.go", "package a\n"), None).action == "block"
    assert header.check(write("src/a.go", "// Copyright 2026 A\npackage a\n"), None).action == (
        "allow"
    )
    fmt = guard_from("Commit message format: `<type>(<scope>): <subject>`.")
    assert fmt.check(bash("git commit -m 'stuff'"), None).action == "block"
    assert fmt.check(bash("git commit -m 'feat(ui): add tabs'"), None).action == "allow"
    when = guard_from("When you change the API, run `npm run openapi` to regenerate the client.")
    commit = bash("git commit -m 'feat: x'")
    assert when.check(commit, None, [write("api/routes.ts")]).action == "block"
    ran = [write("api/routes.ts"), bash("npm run openapi")]
    assert when.check(commit, None, ran).action == "allow"


def test_commit_of_a_kind_of_work_is_not_every_commit() -> None:
    spec = compile_guard(read("Don't commit half-finished work."))
    assert spec is None or Guard("g", spec).check(bash("git commit -m x"), None).action == "allow"


def test_formatter_phrasings_with_a_heading_or_an_imperative() -> None:
    change, commit = write("src/a.py"), bash("git commit -m 'fix: x'")
    for text, step in (
        ("**Formatting**: Run `npm run format` before you commit.", "npm run format"),
        ("Format with `black` (line length 100).", "black ."),
    ):
        guard = guard_from(text)
        assert guard.check(commit, None, [change]).action == "block", text
        assert guard.check(commit, None, [change, bash(step)]).action == "allow", text


def test_run_the_linter_with_no_command_named() -> None:
    guard = guard_from("Run the linter before pushing.")
    change, commit = write("src/a.ts"), bash("git commit -m 'fix: x'")
    assert guard.check(commit, None, [change]).action == "block"
    assert guard.check(commit, None, [change, bash("pnpm eslint src")]).action == "allow"
    assert compile_guard(read("The linter runs in CI.")) is None


def test_a_kind_of_step_blocks_the_commit_but_is_never_proposed_as_a_command() -> None:
    spec = compile_guard(read("Run the linter before pushing."))
    assert spec is not None
    history = [write("src/a.ts")]
    blocked = Guard("g", spec).check(bash("git commit -m 'fix: x'"), None, history)
    assert blocked.action == "block" and "Run the linter first." in blocked.message
    assert GuardSet([Guard("g", spec)]).missing_steps(history) == []
