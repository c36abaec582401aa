"""Rule shapes the guard compiler knows, each with the self-check that proves its guard.

A shape reads one general form of rule ("no default exports", "after changing X run Y",
"commit messages follow Conventional Commits", "`client/` never imports `server/`") and
returns the declarative rule together with two situations it synthesises: one that
violates the rule and one that complies. `compile.compile_guard` keeps a rule only when
its guard fires on the first and lets the second through, so a CODE decision always
names a guard that has been seen to work.

The families live in their own modules (`content`, `idioms`, `dependencies`, `git`,
`sequence`, `paths`, `conventions`, `repo_policy`) and share `kit`; this module holds the
table. `SHAPES` is the order the compiler walks (the first shape that reads a rule wins),
so it is kept in one place here rather than scattered with the families.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from continual_lsp.lanes.guards.guard_set import Guard
from continual_lsp.lanes.guards.spec import (
    CommandRule,
    ContentRule,
    GuardSpec,
    PathRule,
    Rule,
    SizeRule,
    ToolRule,
    literal_command,
)
from continual_lsp.lanes.shapes.content import content_shapes
from continual_lsp.lanes.shapes.dependencies import (
    dependency_shapes,
    package_manager_shapes,
    program_pattern,
    runner_shapes,
    wrapper_shapes,
)
from continual_lsp.lanes.shapes.git import git_shapes
from continual_lsp.lanes.shapes.idioms import convention_shapes
from continual_lsp.lanes.shapes.kit import (
    Probe,
    Shaped,
    bash_probe,
    dir_globs,
    example_path,
    new_ones_allowed,
    write_pair,
    write_probe,
)
from continual_lsp.lanes.shapes.paths import (
    existing_only_shape,
    naming_shapes,
    path_shapes,
    placement_shapes,
    read_first_shapes,
)
from continual_lsp.lanes.shapes.sequence import sequence_shapes
from continual_lsp.tools.base import ToolCall

SHAPES: list[Callable[[str], list[Shaped]]] = [
    content_shapes,
    convention_shapes,
    dependency_shapes,
    git_shapes,
    sequence_shapes,
    naming_shapes,
    path_shapes,
    package_manager_shapes,
    runner_shapes,
    wrapper_shapes,
    placement_shapes,
    read_first_shapes,
]


def shaped_rules(text: str, table: Sequence[Callable[[str], list[Shaped]]] = SHAPES) -> list[Rule]:
    """The rules of every shape of `table` that `text` has whose guard passes its
    self-check."""
    rules: list[Rule] = []
    for shape in table:
        for shaped in shape(text):
            if fires(shaped):
                rules.append(shaped.rule)
    return rules


__all__ = [
    "SHAPES",
    "Probe",
    "Shaped",
    "dir_globs",
    "fires",
    "new_ones_allowed",
    "program_pattern",
    "shaped_rules",
    "synthesise",
]


def synthesise(rule: Rule) -> Shaped | None:
    """A violating and a compliant situation for a rule the phrase patterns compiled, or
    None when its form gives no literal to build one from (a hand-written regex)."""
    if isinstance(rule, CommandRule):
        literal = literal_command(rule.pattern)
        if literal is None:
            return None
        bad = literal if literal.startswith("-") is False else f"tool {literal}"
        return Shaped(rule, bash_probe(f"{bad} x"), bash_probe("echo ok"))
    if isinstance(rule, PathRule) and rule.mode == "deny" and rule.existing_only:
        return existing_only_shape(rule)
    if isinstance(rule, PathRule) and rule.mode == "deny":
        tool = "write" if "write" in rule.tools else rule.tools[0]
        inside = rule.globs[0].replace("**", "x").replace("*", "x")
        call = ToolCall(tool=tool, arguments={"path": inside, "content": "x\n"})
        if tool != "write":
            return None
        return Shaped(rule, Probe(call), write_probe("elsewhere/ok.txt", "x\n"))
    if isinstance(rule, ContentRule) and not rule.required:
        literal = re.sub(r"\\b|\\w\*", "", rule.pattern)
        literal = re.sub(r"\\(.)", r"\1", literal)
        if not literal or re.search(r"[\[\](){}|^$+?]", literal.replace("()", "")):
            return None
        path = example_path(rule.path_globs, "src/example.py")
        return write_pair(rule, path, f"x = {literal}\n", "x = 1\n")
    if isinstance(rule, SizeRule) and rule.max_lines is not None:
        return write_pair(rule, "src/a.py", "x\n" * (rule.max_lines + 1), "x\n")
    if isinstance(rule, ToolRule) and rule.deny and not rule.existing_files_only:
        tool = rule.deny[0]
        args = {"cmd": "echo x"} if tool == "bash" else {"path": "a.txt", "content": "x"}
        other = "read" if tool != "read" else "glob"
        other_args = {"path": "a.txt"} if other == "read" else {"pattern": "*"}
        return Shaped(
            rule,
            Probe(ToolCall(tool=tool, arguments=args)),
            Probe(ToolCall(tool=other, arguments=other_args)),
        )
    return None


def fires(shaped: Shaped) -> bool:
    """The self-check: the rule's guard blocks (or, a substitution, rewrites) the violating
    situation and allows the compliant one."""
    guard = Guard("self-check", GuardSpec(message="self-check", rules=[shaped.rule]))
    bad_, good_ = shaped.violating, shaped.compliant
    bad = guard.check(bad_.call, bad_.preview, bad_.history)
    good = guard.check(good_.call, good_.preview, good_.history)
    return bad.action in ("block", "rewrite") and good.action == "allow"
