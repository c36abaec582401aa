"""Procedurally generated workspaces with one defect or request each (the starter curriculum).

An `Exercise` is a small workspace (file path → text), a task text, and the ideal calls:
look first (read / grep / glob), make the smallest change, run the project's check when
there is one. Everything is drawn from a `random.Random` and a vocabulary (`vocab.json`
for training; `bench/agent_skill.py` passes its own held-out vocabulary), so a seed gives
the same curriculum on any machine.

Longer than 500 lines on purpose: one builder per exercise kind, all drawing on the same
vocabulary and the shared one-line-fix shape; the kinds read best side by side.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from continual_lsp.tools.base import ToolCall

VOCAB_FILE = Path(__file__).with_name("vocab.json")


def load_vocab(path: Path = VOCAB_FILE) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8")))


def call(tool: str, **arguments: Any) -> ToolCall:
    return ToolCall(tool=tool, arguments=arguments)  # type: ignore[arg-type]


@dataclass
class Exercise:
    """One task on one workspace; `change` is the index in `plan` of the first change."""

    kind: str
    language: str
    files: dict[str, str]
    task: str
    plan: list[ToolCall]
    change: int
    target: str  # the path the change is on ("" for a bash-only task)
    check: str | None  # the command that passes once the task is done
    # What corrections need: the fixed line's number and text, the line it replaced, …
    facts: dict[str, Any] = field(default_factory=dict)
    # Turns the model did wrong on its own (a look that found nothing): executed and shown
    # in the history, never trained on, so the next call teaches the recovery.
    untrained: set[int] = field(default_factory=set)
    # Files changed and staged over a first commit of `files`: a non-empty one makes the
    # workspace a git repository (`episodes.write_workspace`).
    staged: dict[str, str] = field(default_factory=dict)

    def fixed_target(self) -> str:
        """The target file with the line fix of `facts` applied: line `n` becomes `new`
        (several lines when it has several; none when it is empty)."""
        lines = self.files[self.target].split("\n")
        n = self.facts["n"]
        lines[n - 1 : n] = self.facts["new"].split("\n") if self.facts["new"] else []
        return "\n".join(lines)


def commit_call(message: str) -> ToolCall:
    return call("bash", cmd=f'git commit -m "{message}"')


@dataclass(frozen=True)
class Defect:
    """A one-line change: line `n` of `path` goes from `old` to `new`; `fn` is what a task
    names when it does not name the file (a function, constant or word to search for)."""

    path: str
    fn: str | None
    n: int
    old: str
    new: str


# Binary operators and a wrong one for each; (good, bad).
_OPS = [("+", "-"), ("-", "+"), ("*", "+"), ("+", "*"), ("//", "*")]
_JS_OPS = [("+", "-"), ("-", "+"), ("*", "+"), ("+", "*")]


# A misspelled local name (a NameError / ReferenceError at the line that uses it).
_MISSPELT = [
    ("result", "reslt"), ("total", "totl"), ("value", "vaule"), ("count", "cuont"),
    ("answer", "anwser"), ("out", "otu"),
]  # fmt: skip

SLIP_RATE = 0.3  # of the exercises whose task names no file

EDIT_SPAN_CHARS = 8  # shorter spans ("+", "30") grow by a word: `a + b`, `= 30`


def edit_span(text: str, old_line: str, new_line: str) -> tuple[str, str] | None:
    """The words of `old_line` that change, and what they become: whole words, grown a
    word at a time (left, right, left, …) until at least EDIT_SPAN_CHARS long and found
    once in `text`; None when even the whole line is not unique or the indentation
    changes."""
    indent = len(old_line) - len(old_line.lstrip())
    if new_line[: len(new_line) - len(new_line.lstrip())] != old_line[:indent]:
        return None
    if old_line == new_line:
        return None
    size = min(len(old_line), len(new_line))
    head = next((i for i in range(size) if old_line[i] != new_line[i]), size)
    tail = 0  # the common suffix, not overlapping the common prefix
    while tail < size - head and old_line[-1 - tail] == new_line[-1 - tail]:
        tail += 1
    starts = [indent] + [i + 1 for i in range(indent, len(old_line)) if old_line[i] == " "]
    ends = [i for i in range(indent, len(old_line)) if old_line[i] == " "] + [len(old_line)]
    a = max(x for x in starts if x <= max(head, indent))
    b = min(x for x in ends if x >= len(old_line) - tail)
    grow_left = True
    while True:
        old = old_line[a:b].strip()
        if len(old) >= EDIT_SPAN_CHARS and text.count(old) == 1:
            new = new_line[a : len(new_line) - (len(old_line) - b)].strip()
            return old, new
        left = [x for x in starts if x < a]
        right = [x for x in ends if x > b]
        if left and (grow_left or not right):
            a = left[-1]
        elif right:
            b = right[0]
        elif text.count(old) == 1:  # the whole line, short but unique
            return old, new_line.strip()
        else:
            return None
        grow_left = not grow_left


def js_test(d: str, stem: str, fn: str, args: str, expected: object) -> str:
    """A node:test file that checks `fn(args) === expected`."""
    return (
        "const test = require('node:test');\nconst assert = require('node:assert');\n"
        f"const {{ {fn} }} = require('../{d}/{stem}');\n\n"
        f"test('{fn}', () => {{\n  assert.strictEqual({fn}({args}), {expected});\n}});\n"
    )


class Builder:
    """Draws exercises from a vocabulary. One instance per generated set."""

    def __init__(self, vocab: dict[str, Any], rng: random.Random) -> None:
        self.v = vocab
        self.rng = rng

    # -- small helpers ---------------------------------------------------------------------

    def pick(self, key: str) -> Any:
        return self.rng.choice(self.v[key])

    def names(self, k: int) -> list[str]:
        return self.rng.sample(self.v["functions"], k)

    def template(self, kind: str, **slots: Any) -> str:
        return str(self.rng.choice(self.v["task_templates"][kind])).format(**slots)

    def look(self, path: str, fn: str | None, named: bool) -> list[ToolCall]:
        """The looking calls before a change: read the named file, else find it first."""
        if named or fn is None:
            return [call("read", path=path)]
        return [call("grep", pat=fn), call("read", path=path)]

    def slip(self, task: str, files: dict[str, str]) -> ToolCall | None:
        """A wrong first look the small model makes on its own when a task names no file:
        grep for an ordinary word of the task (it finds nothing) or read the README. Put
        before the right plan untrained, it teaches what to do next: grep the name."""
        if self.rng.random() < 0.5 and "README.md" in files:
            return call("read", path="README.md")
        # A word no file holds: never the name itself, which the right grep finds.
        words = [
            w for w in re.findall(r"[A-Za-z]{4,}", task) if not any(w in t for t in files.values())
        ]
        if not words:
            return None
        first = words[0] if self.rng.random() < 0.5 else self.rng.choice(words)
        return call("grep", pat=first)

    def looked(self, s: Exercise, fn: str | None) -> Exercise:
        """`s` with, sometimes, a wrong first look before a grep for `fn` (see `slip`)."""
        if fn is None or s.plan[0].tool != "grep" or self.rng.random() >= SLIP_RATE:
            return s
        wrong = self.slip(s.task, s.files)
        if wrong is None:
            return s
        s.plan.insert(0, wrong)
        s.change += 1
        s.untrained = {0}
        return s

    def change_call(self, d: Defect, text: str, words: bool) -> ToolCall:
        """The smallest change of line `d.n`: `edit` of the few words that change (always
        for `words`: prose, config and names; mostly for code), else edit_lines. An edit
        copies only what it changes, never the line's indentation or its other words,
        which a small model copies wrong (a Go tab lost, a word dropped, the line above)."""
        span = edit_span(text, d.old, d.new) if "\n" not in d.new else None
        if span is not None and (words or self.rng.random() < 0.7):
            return call("edit", path=d.path, old=span[0], new=span[1])
        return call("edit_lines", path=d.path, start=d.n, end=d.n, content=d.new)

    # -- source files ----------------------------------------------------------------------

    def functions(self, body: list[str], fillers: list[str], js: bool) -> tuple[list[str], int]:
        """The target function among filler functions; (lines, first line of the target)."""
        lines: list[str] = []
        start = 0
        slot = self.rng.randrange(len(fillers) + 1)
        for i in range(len(fillers) + 1):
            if lines:
                lines += [""] if js else ["", ""]
            if i == slot:
                start = len(lines) + 1
                lines += body
                continue
            name = fillers[i if i < slot else i - 1]
            a, b = self.pick("args")
            good, _ = self.rng.choice(_JS_OPS if js else _OPS)
            if js:
                lines += [f"function {name}({a}, {b}) {{", f"  return {a} {good} {b};", "}"]
            else:
                lines += [f"def {name}({a}, {b}):", f"    return {a} {good} {b}"]
        return lines, start

    def py_module(self, target_fn: str, body: list[str], fillers: list[str]) -> tuple[str, int]:
        """A module with the target function among fillers; (text, first line of target)."""
        lines, start = self.functions(body, fillers, js=False)
        return "\n".join(lines) + "\n", start

    def js_module(self, target_fn: str, body: list[str], fillers: list[str]) -> tuple[str, int]:
        lines, start = self.functions(body, fillers, js=True)
        names = ", ".join([target_fn, *fillers])
        lines += ["", f"module.exports = {{ {names} }};"]
        return "\n".join(lines) + "\n", start

    def py_project(self, module: str, path: str, tests: str | None) -> dict[str, str]:
        pkg = path.split("/")[0]
        files = {path: module, f"{pkg}/__init__.py": ""}
        if tests is not None:
            stem = Path(path).stem
            files[f"tests/test_{stem}.py"] = tests
        files["README.md"] = f"# {Path(path).stem}\n\nRun the tests with `python3 -m pytest -q`.\n"
        return files

    def js_project(self, module: str, path: str, tests: str | None) -> dict[str, str]:
        stem = Path(path).stem
        files = {path: module}
        if tests is not None:
            files[f"tests/{stem}.test.js"] = tests
        files["package.json"] = json.dumps(
            {"name": stem, "version": "1.0.0", "scripts": {"test": "node --test"}}, indent=2
        )
        return files

    # -- exercise kinds --------------------------------------------------------------------

    def operator(self, lang: str | None = None) -> Exercise:
        lang = lang or self.rng.choice(["py", "py", "js", "go", "rs"])
        fn, *fillers = self.names(self.rng.randint(1, 3))
        a, b = self.pick("args")
        good, bad = self.rng.choice(_JS_OPS if lang != "py" else _OPS)
        x, y = self.rng.randint(5, 9), self.rng.randint(2, 4)
        expected = {"+": x + y, "-": x - y, "*": x * y, "//": x // y}[good]
        d, stem = self.pick("dirs"), self.pick("stems")
        self.rng.random()  # an unused draw, kept so that seeded curricula stay as they were
        check: str | None = None
        if lang == "py":
            path = f"{d}/{stem}.py"
            body = [f"def {fn}({a}, {b}):", f"    return {a} {bad} {b}"]
            text, start = self.py_module(fn, body, fillers)
            tests = f"from {d}.{stem} import {fn}\n\n\ndef test_{fn}():\n    assert {fn}({x}, {y}) == {expected}\n"
            files = self.py_project(text, path, tests)
            check = "python3 -m pytest -q"
            n, old, new = start + 1, body[1], f"    return {a} {good} {b}"
        elif lang == "js":
            path = f"{d}/{stem}.js"
            body = [f"function {fn}({a}, {b}) {{", f"  return {a} {bad} {b};", "}"]
            text, start = self.js_module(fn, body, fillers)
            tests = js_test(d, stem, fn, f"{x}, {y}", expected)
            files = self.js_project(text, path, tests)
            check = "node --test"
            n, old, new = start + 1, body[1], f"  return {a} {good} {b};"
        elif lang == "go":
            path = f"{d}/{stem}.go"
            lines = [
                f"package {d}",
                "",
                f"func {fn}({a}, {b} int) int {{",
                f"\treturn {a} {bad} {b}",
                "}",
            ]
            files = {
                path: "\n".join(lines) + "\n",
                "go.mod": f"module example.org/{stem}\n\ngo 1.21\n",
            }
            n, old, new = 4, lines[3], f"\treturn {a} {good} {b}"
        else:
            path = f"src/{stem}.rs"
            lines = [f"pub fn {fn}({a}: i64, {b}: i64) -> i64 {{", f"    {a} {bad} {b}", "}"]
            files = {
                path: "\n".join(lines) + "\n",
                "Cargo.toml": f'[package]\nname = "{stem}"\nversion = "0.1.0"\n',
            }
            n, old, new = 2, lines[1], f"    {a} {good} {b}"
        task = self.template("operator", fn=fn, path=path, bad=bad, good=good)
        defect = Defect(path, fn, n, old, new)
        return self._line_fix("operator", lang, files, task, defect, check)

    def off_by_one(self, lang: str | None = None) -> Exercise:
        lang = lang or self.rng.choice(["py", "js"])
        fn, *fillers = self.names(self.rng.randint(1, 3))
        d, stem = self.pick("dirs"), self.pick("stems")
        lim = self.rng.choice(["limit", "n", "upto", "top"])
        m = self.rng.randint(3, 7)
        expected = m * (m + 1) // 2
        if lang == "py":
            path = f"{d}/{stem}.py"
            body = [
                f"def {fn}({lim}):",
                "    total = 0",
                f"    for i in range(1, {lim}):",
                "        total += i",
                "    return total",
            ]
            text, start = self.py_module(fn, body, fillers)
            tests = f"from {d}.{stem} import {fn}\n\n\ndef test_{fn}():\n    assert {fn}({m}) == {expected}\n"
            files = self.py_project(text, path, tests)
            n, old, new = start + 2, body[2], f"    for i in range(1, {lim} + 1):"
            check = "python3 -m pytest -q"
        else:
            path = f"{d}/{stem}.js"
            body = [
                f"function {fn}({lim}) {{",
                "  let total = 0;",
                f"  for (let i = 1; i < {lim}; i++) {{",
                "    total += i;",
                "  }",
                "  return total;",
                "}",
            ]
            text, start = self.js_module(fn, body, fillers)
            tests = js_test(d, stem, fn, f"{m}", expected)
            files = self.js_project(text, path, tests)
            n, old, new = start + 2, body[2], f"  for (let i = 1; i <= {lim}; i++) {{"
            check = "node --test"
        task = self.template("off_by_one", fn=fn, path=path)
        defect = Defect(path, fn, n, old, new)
        return self._line_fix("off_by_one", lang, files, task, defect, check)

    def missing_return(self) -> Exercise:
        fn, *fillers = self.names(self.rng.randint(1, 3))
        d, stem = self.pick("dirs"), self.pick("stems")
        xs = self.rng.choice(["items", "values", "rows", "nums"])
        k = self.rng.randint(2, 5)
        path = f"{d}/{stem}.py"
        body = [f"def {fn}({xs}):", f"    result = [v * {k} for v in {xs}]"]
        text, start = self.py_module(fn, body, fillers)
        tests = f"from {d}.{stem} import {fn}\n\n\ndef test_{fn}():\n    assert {fn}([1, 2]) == [{k}, {2 * k}]\n"
        files = self.py_project(text, path, tests)
        n = start + 1
        new = body[1] + "\n    return result"
        task = self.template("missing_return", fn=fn, path=path)
        defect = Defect(path, fn, n, body[1], new)
        # The return is inserted after line n; the line above it is not copied.
        insert = call("edit_lines", path=path, start=n + 1, end=n, content="    return result")
        check = "python3 -m pytest -q"
        return self._line_fix("missing_return", "py", files, task, defect, check, change=insert)

    def constant(self) -> Exercise:
        lang = self.rng.choice(["py", "js", "go", "sh"])
        name = self.pick("constants")
        old_v, new_v = self.rng.sample([5, 10, 20, 30, 45, 60, 90, 100, 120, 250], 2)
        d, stem = self.pick("dirs"), self.pick("stems")
        fn = self.names(1)[0]
        if lang == "py":
            path = f"{d}/settings.py"
            lines = ['"""Tunables."""', "", f"{name} = {old_v}", f"{fn.upper()}_ENABLED = True"]
            fmt = f"{name} = {{}}"
        elif lang == "js":
            path = f"{d}/config.js"
            lines = [
                "'use strict';",
                "",
                f"const {name} = {old_v};",
                "",
                f"module.exports = {{ {name} }};",
            ]
            fmt = f"const {name} = {{}};"
        elif lang == "go":
            path = f"{d}/limits.go"
            lines = [f"package {d}", "", f"const {name} = {old_v}"]
            fmt = f"const {name} = {{}}"
        else:
            path = f"scripts/{stem}.sh"
            lines = ["#!/bin/sh", "set -e", f"{name}={old_v}", f'echo "{stem} with ${name}"']
            fmt = f"{name}={{}}"
        n = next(i for i, line in enumerate(lines, 1) if line.startswith((name, f"const {name}")))
        files = {path: "\n".join(lines) + "\n", "README.md": f"# {stem}\n"}
        task = self.template("constant", name=name, old=old_v, new=new_v, path=path)
        defect = Defect(path, name, n, lines[n - 1], fmt.format(new_v))
        s = self._line_fix("constant", lang, files, task, defect, None)
        s.facts.update(good=str(new_v), bad=str(old_v), fmt=fmt)
        return s

    def typo(self) -> Exercise:
        bad, good = self.pick("typos")
        sentences = self.rng.sample(self.v["doc_sentences"], 3)
        stem = self.pick("stems")
        path = self.rng.choice(["README.md", f"docs/{stem}.md", "CONTRIBUTING.md"])
        fill = [s.replace("{w}", "quite") for s in sentences]
        n = self.rng.randrange(3) + 3
        fill[n - 3] = sentences[n - 3].replace("{w}", bad)
        lines = [f"# {stem.title()}", "", *fill]
        files = {path: "\n".join(lines) + "\n"}
        task = self.template("typo", bad=bad, good=good, path=path)
        defect = Defect(path, bad, n, lines[n - 1], lines[n - 1].replace(bad, good))
        s = self._line_fix("typo", "md", files, task, defect, None)
        return s

    def config(self) -> Exercise:
        fmt = self.rng.choice(["json", "toml", "yaml"])
        keys = self.rng.sample(self.v["config_keys"], 3)
        key = keys[0]
        old_v, new_v = self.rng.sample(self.v["config_values"][key], 2)
        vals = {k: self.v["config_values"][k][0] for k in keys}
        vals[key] = old_v
        order = self.rng.sample(keys, 3)
        path = {"json": "config.json", "toml": "settings.toml", "yaml": "app.yaml"}[fmt]

        def line(k: str, v: str) -> str:
            num = v.isdigit()
            if fmt == "json":
                return f'  "{k}": {v if num else json.dumps(v)}'
            if fmt == "toml":
                return f"{k} = {v if num else json.dumps(v)}"
            return f"{k}: {v}"

        body = [line(k, vals[k]) for k in order]
        if fmt == "json":
            body = [b + ("," if i < 2 else "") for i, b in enumerate(body)]
            lines = ["{", *body, "}"]
        elif fmt == "toml":
            lines = ["[server]", *body]
        else:
            lines = ["server:", *["  " + b for b in body]]
        n = next(i for i, ln in enumerate(lines, 1) if key in ln)
        new_line = lines[n - 1].replace(old_v, new_v)
        files = {path: "\n".join(lines) + "\n"}
        task = self.template("config", key=key, new=new_v, old=old_v, path=path)
        defect = Defect(path, None, n, lines[n - 1], new_line)
        s = self._line_fix("config", fmt, files, task, defect, None)
        s.facts.update(good=new_v, bad=old_v)
        return s

    def add_line(self) -> Exercise:
        if self.rng.random() < 0.5:
            path, entries = ".gitignore", self.rng.sample(self.v["ignore_entries"], 4)
        else:
            path, entries = "requirements.txt", self.rng.sample(self.v["packages_py"], 4)
        lines, entry = entries[:3], entries[3]
        files = {path: "\n".join(lines) + "\n", "README.md": "# project\n"}
        task = self.template("add_line", entry=entry, path=path)
        n = len(lines)
        defect = Defect(path, None, n, lines[-1], lines[-1] + "\n" + entry)
        # Appended with an insertion (start = n + 1, end = n): only the new line is written,
        # never a copy of the last one, which a small model garbles.
        append = call("edit_lines", path=path, start=n + 1, end=n, content=entry)
        return self._line_fix("add_line", "text", files, task, defect, None, change=append)

    def remove_line(self) -> Exercise:
        lang = self.rng.choice(["py", "js"])
        fn, *fillers = self.names(self.rng.randint(1, 2))
        a, b = self.pick("args")
        d, stem = self.pick("dirs"), self.pick("stems")
        if lang == "py":
            path = f"{d}/{stem}.py"
            body = [
                f"def {fn}({a}, {b}):",
                f'    print("debug", {a}, {b})',
                f"    return {a} + {b}",
            ]
            text, start = self.py_module(fn, body, fillers)
            files = self.py_project(text, path, None)
        else:
            path = f"{d}/{stem}.js"
            body = [
                f"function {fn}({a}, {b}) {{",
                f"  console.log('debug', {a}, {b});",
                f"  return {a} + {b};",
                "}",
            ]
            text, start = self.js_module(fn, body, fillers)
            files = self.js_project(text, path, None)
        task = self.template("remove_line", fn=fn, path=path)
        n = start + 1
        defect = Defect(path, fn, n, body[1], "")
        remove = call("edit_lines", path=path, start=n, end=n, content="")
        return self._line_fix("remove_line", lang, files, task, defect, None, change=remove)

    def rename(self) -> Exercise:
        fn, *fillers = self.names(self.rng.randint(1, 3))
        new_name = self.rng.choice(self.v["renames"])
        a, b = self.pick("args")
        d, stem = self.pick("dirs"), self.pick("stems")
        path = f"{d}/{stem}.py"
        body = [f"def {fn}({a}, {b}):", f"    return {a} * {b}"]
        text, start = self.py_module(fn, body, fillers)
        files = self.py_project(text, path, None)
        task = self.template("rename", old=fn, new=new_name, path=path)
        defect = Defect(path, fn, start, body[0], body[0].replace(fn, new_name))
        return self._line_fix("rename", "py", files, task, defect, None)

    def create(self) -> Exercise:
        fn = self.names(1)[0]
        value = self.rng.choice([0, 1, 7, 42, 100, "'ok'", "[]", "True"])
        d, stem = self.pick("dirs"), self.pick("stems")
        path = f"{d}/{stem}.py"
        other = f"{d}/{self.pick('stems')}_util.py"
        files = {
            other: "def helper():\n    return None\n",
            f"{d}/__init__.py": "",
            "README.md": "# project\n",
        }
        content = f"def {fn}():\n    return {value}\n"
        task = self.template("create", path=path, fn=fn, value=value)
        plan = [call("glob", pat=f"{d}/*.py"), call("write", path=path, content=content)]
        plan.append(call("read", path=path))
        return Exercise(
            "create",
            "py",
            files,
            task,
            plan,
            1,
            path,
            None,
            {"content": content, "fn": fn, "value": value},
        )

    def add_test(self) -> Exercise:
        fn = self.names(1)[0]
        a, b = self.pick("args")
        d, stem = self.pick("dirs"), self.pick("stems")
        path = f"{d}/{stem}.py"
        x, y = self.rng.randint(2, 9), self.rng.randint(2, 9)
        files = self.py_project(f"def {fn}({a}, {b}):\n    return {a} + {b}\n", path, None)
        test_path = f"tests/test_{stem}.py"
        content = f"from {d}.{stem} import {fn}\n\n\ndef test_{fn}():\n    assert {fn}({x}, {y}) == {x + y}\n"
        task = self.template("add_test", fn=fn, path=test_path)
        check = "python3 -m pytest -q"
        # The task names the function, not its module: find it before reading it.
        plan = [
            *self.look(path, fn, named=False),
            call("write", path=test_path, content=content),
            call("bash", cmd=check),
        ]
        s = Exercise("add_test", "py", files, task, plan, 2, test_path, check, {"content": content})
        return self.looked(s, fn)

    def commit(self) -> Exercise:
        """A one-line fix made and staged already; the task is to see what is staged and
        commit it with a message in plain words of what the fix does."""
        fix = self.rng.choice(["operator", "off_by_one", "constant", "typo"])
        s: Exercise = getattr(self, fix)()
        f = s.facts
        slots = {"fn": f["fn"], "path": s.target, "good": f.get("good", "")}
        message = str(self.rng.choice(self.v["commit_messages"][fix])).format(**slots)
        task = self.template("commit", **slots)
        look = call("bash", cmd=str(self.rng.choice(self.v["staged_looks"])))
        plan = [look, commit_call(message)]
        facts = {**slots, "message": message, "new": f["new"]}
        staged = {s.target: s.fixed_target()}
        return Exercise(
            "commit", s.language, s.files, task, plan, 1, "", None, facts, staged=staged
        )

    def run_tests(self) -> Exercise:
        s = self.operator() if self.rng.random() < 0.5 else self.off_by_one()
        if s.check is None:
            return self.run_tests()
        # The defect fixed already: the task is only to run the check.
        fixed = {**s.files, s.target: s.fixed_target()}
        # The command varies and is written down only in the project's own file, so the
        # skill taught is "find how this project runs its tests", not one memorised command.
        cmd = str(self.rng.choice(self.v["test_commands"][s.language]))
        if s.language == "py":
            doc = "README.md"
            title = fixed[doc].split("\n", 1)[0]
            fixed[doc] = f"{title}\n\n" + str(self.pick("test_docs")).format(cmd=cmd)
        else:
            doc = "package.json"
            manifest = json.loads(fixed[doc])
            manifest["scripts"]["test"] = cmd
            fixed[doc] = json.dumps(manifest, indent=2)
        task = self.template("run_tests")
        plan = [call("read", path=doc), call("bash", cmd=cmd)]
        return Exercise("run_tests", s.language, fixed, task, plan, 1, "", cmd)

    def add_dep(self) -> Exercise:
        lang = self.rng.choice(["py", "js"])
        pkg = self.pick("packages_py" if lang == "py" else "packages_js")
        bad, good, mgr = self.rng.choice(self.v["managers"][lang])
        manifest = "pyproject.toml" if lang == "py" else "package.json"
        stem = self.pick("stems")
        files = {
            manifest: f'[project]\nname = "{stem}"\ndependencies = []\n'
            if lang == "py"
            else json.dumps({"name": stem, "dependencies": {}}, indent=2),
            "README.md": "# project\n",
        }
        task = self.template("add_dep", pkg=pkg)
        plan = [call("read", path=manifest), call("bash", cmd=good.format(p=pkg))]
        return Exercise(
            "add_dep",
            lang,
            files,
            task,
            plan,
            1,
            "",
            None,
            {
                "bad": bad.format(p=pkg),
                "good": good.format(p=pkg),
                "mgr": mgr,
                "badmgr": bad.split()[0],
            },
        )

    # -- shared shape of a one-line fix --------------------------------------------------------

    def _line_fix(
        self,
        kind: str,
        lang: str,
        files: dict[str, str],
        task: str,
        defect: Defect,
        check: str | None,
        change: ToolCall | None = None,
    ) -> Exercise:
        """`change` is the edit when it is not the default `change_call` of the defect."""
        path, fn, n, old, new = defect.path, defect.fn, defect.n, defect.old, defect.new
        plan = self.look(path, fn, path in task)
        first_change = len(plan)
        if change is not None:
            plan.append(change)
        else:
            words = kind in ("typo", "config", "rename")
            plan.append(self.change_call(defect, files[path], words))
        # Then the project's check; without one, read the file again (a repeat ends a task).
        plan.append(call("bash", cmd=check) if check else call("read", path=path))
        s = Exercise(
            kind,
            lang,
            files,
            task,
            plan,
            first_change,
            path,
            check,
            {"n": n, "old": old, "new": new, "fn": fn},
        )
        return self.looked(s, fn)

    # -- multi-step: run the check, read what its output names, fix, run it again ----------

    def _defect_project(self, lang: str) -> tuple[dict[str, str], Defect, str, str]:
        """A project whose test fails on one wrong line (an operator or a loop bound):
        (files, defect, test path, check)."""
        s = self.operator(lang) if self.rng.random() < 0.5 else self.off_by_one(lang)
        f = s.facts
        stem = Path(s.target).stem
        test = f"tests/test_{stem}.py" if lang == "py" else f"tests/{stem}.test.js"
        assert s.check is not None
        return s.files, Defect(s.target, f["fn"], f["n"], f["old"], f["new"]), test, s.check

    def _multi(
        self,
        kind: str,
        lang: str,
        files: dict[str, str],
        task: str,
        plan: list[ToolCall],
        check: str,
        d: Defect,
        **facts: Any,
    ) -> Exercise:
        """A multi-step exercise: `plan` runs `check` (it fails), looks, changes `d`; the
        check is run again (it passes) and the model says it is done."""
        change = len(plan) - 1
        plan = [*plan, call("bash", cmd=check)]
        facts = {"n": d.n, "old": d.old, "new": d.new, "fn": d.fn, **facts}
        return Exercise(kind, lang, files, task, plan, change, d.path, check, facts)

    def failing_test(self) -> Exercise:
        """The tests fail on a wrong value: the output names the test file and line and the
        function; read the test (or grep the function) to find the module, then fix it."""
        lang = self.rng.choice(["py", "py", "js"])
        files, d, test, check = self._defect_project(lang)
        assert d.fn is not None
        defined = f"def {d.fn}" if lang == "py" else f"function {d.fn}"
        if self.rng.random() < 0.5:
            look = [call("read", path=test), call("read", path=d.path)]
        else:
            look = [call("grep", pat=defined), call("read", path=d.path)]
        task = self.template("failing_test", check=check)
        fix = self.change_call(d, files[d.path], words=False)
        plan = [call("bash", cmd=check), *look, fix]
        return self._multi("failing_test", lang, files, task, plan, check, d)

    def crash(self) -> Exercise:
        """A command (or the tests) dies with a NameError / ReferenceError: the traceback
        names the file and line; read that file, fix the name, run it again."""
        lang = self.rng.choice(["py", "js"])
        fn, *fillers = self.names(self.rng.randint(1, 3))
        a, b = self.pick("args")
        good, _bad = self.rng.choice(_JS_OPS)
        name, wrong = self.rng.choice(_MISSPELT)
        d, stem = self.pick("dirs"), self.pick("stems")
        x, y = self.rng.randint(5, 9), self.rng.randint(2, 4)
        expected = {"+": x + y, "-": x - y, "*": x * y}[good]
        as_command = self.rng.random() < 0.5
        if lang == "py":
            path = f"{d}/{stem}.py"
            body = [f"def {fn}({a}, {b}):", f"    {name} = {a} {good} {b}", f"    return {wrong}"]
            text, start = self.py_module(fn, body, fillers)
            new = f"    return {name}"
            if as_command:
                text += f'\n\nif __name__ == "__main__":\n    print({fn}({x}, {y}))\n'
                files = self.py_project(text, path, None)
                check = f"python3 -m {d}.{stem}"
            else:
                tests = f"from {d}.{stem} import {fn}\n\n\ndef test_{fn}():\n    assert {fn}({x}, {y}) == {expected}\n"
                files = self.py_project(text, path, tests)
                check = "python3 -m pytest -q"
        else:
            path = f"{d}/{stem}.js"
            body = [
                f"function {fn}({a}, {b}) {{",
                f"  const {name} = {a} {good} {b};",
                f"  return {wrong};",
                "}",
            ]
            text, start = self.js_module(fn, body, fillers)
            new = f"  return {name};"
            if as_command:
                text += f"\nif (require.main === module) {{\n  console.log({fn}({x}, {y}));\n}}\n"
                files = self.js_project(text, path, None)
                check = f"node {path}"
            else:
                files = self.js_project(text, path, js_test(d, stem, fn, f"{x}, {y}", expected))
                check = "node --test"
        defect = Defect(path, fn, start + 2, body[2], new)
        group = "failing_command" if as_command else "failing_test"
        task = self.template(group, check=check)
        fix = self.change_call(defect, files[path], words=False)
        plan = [call("bash", cmd=check), call("read", path=path), fix]
        return self._multi("crash", lang, files, task, plan, check, defect, name=name, wrong=wrong)

    def missing_file(self) -> Exercise:
        """A command opens a data file by a name that does not exist: the error names the
        missing path; list the folder, read the code, point it at the file that is there.
        Sometimes the model first reads the missing file (shown, not trained)."""
        lang = self.rng.choice(["py", "js"])
        fn = self.names(1)[0]
        d, stem, other = self.pick("dirs"), *self.rng.sample(self.v["stems"], 2)
        ext = self.rng.choice(["txt", "csv", "json"])
        wrong, right = f"{stem}.{ext}", f"{stem}_{other}.{ext}"
        if lang == "py":
            path = f"{d}/{stem}.py"
            lines = [
                "from pathlib import Path",
                "",
                f'DATA = Path(__file__).resolve().parent.parent / "data" / "{wrong}"',
                "",
                "",
                f"def {fn}():",
                "    return len(DATA.read_text().splitlines())",
                "",
                "",
                'if __name__ == "__main__":',
                f"    print({fn}())",
            ]
            files = self.py_project("\n".join(lines) + "\n", path, None)
            check = f"python3 -m {d}.{stem}"
        else:
            path = f"{d}/{stem}.js"
            lines = [
                "const fs = require('fs');",
                "const path = require('path');",
                f"const DATA = path.join(__dirname, '..', 'data', '{wrong}');",
                "",
                f"function {fn}() {{",
                "  return fs.readFileSync(DATA, 'utf8').split('\\n').length;",
                "}",
                "",
                f"module.exports = {{ {fn} }};",
                "",
                "if (require.main === module) {",
                f"  console.log({fn}());",
                "}",
            ]
            files = self.js_project("\n".join(lines) + "\n", path, None)
            check = f"node {path}"
        files[f"data/{right}"] = "alpha\nbeta\ngamma\n"
        n = 3
        defect = Defect(path, fn, n, lines[n - 1], lines[n - 1].replace(wrong, right))
        task = self.template("failing_command", check=check)
        plan = [call("bash", cmd=check)]
        untrained: set[int] = set()
        if self.rng.random() < 0.3:
            plan.append(call("read", path=f"data/{wrong}"))
            untrained = {1}
        plan += [call("glob", pat="data/*"), call("read", path=path)]
        plan.append(call("edit", path=path, old=wrong, new=right))
        s = self._multi("missing_file", lang, files, task, plan, check, defect, wrong=wrong)
        s.facts.update(right=right)
        s.untrained = untrained
        return s

    def missing_name(self) -> Exercise:
        """The test imports a function the module spells differently. pytest names the
        module (a grep for the definition finds nothing first), node the test file (whose
        require names the module); the module shows the other spelling, and the
        definition is renamed, never the test."""
        lang = self.rng.choice(["py", "js"])
        fn, *fillers = self.names(self.rng.randint(1, 3))
        wrong = fn.replace("_", "", 1) if "_" in fn else fn + "s"
        if wrong == fn or any(wrong == f for f in fillers):
            return self.missing_name()
        a, b = self.pick("args")
        good, _ = self.rng.choice(_JS_OPS)
        d, stem = self.pick("dirs"), self.pick("stems")
        x, y = self.rng.randint(5, 9), self.rng.randint(2, 4)
        expected = {"+": x + y, "-": x - y, "*": x * y}[good]
        if lang == "py":
            path = f"{d}/{stem}.py"
            body = [f"def {wrong}({a}, {b}):", f"    return {a} {good} {b}"]
            text, start = self.py_module(wrong, body, fillers)
            tests = f"from {d}.{stem} import {fn}\n\n\ndef test_{fn}():\n    assert {fn}({x}, {y}) == {expected}\n"
            files = self.py_project(text, path, tests)
            check = "python3 -m pytest -q"
            # The error names the module; the grep for the definition finds nothing.
            look = [call("grep", pat=f"def {fn}"), call("read", path=path)]
            fix = call("edit", path=path, old=f"def {wrong}(", new=f"def {fn}(")
        else:
            path = f"{d}/{stem}.js"
            body = [f"function {wrong}({a}, {b}) {{", f"  return {a} {good} {b};", "}"]
            text, start = self.js_module(wrong, body, fillers)
            files = self.js_project(text, path, js_test(d, stem, fn, f"{x}, {y}", expected))
            check = "node --test"
            # Node names only the test file: its require() names the module.
            look = [call("read", path=f"tests/{stem}.test.js"), call("read", path=path)]
            fix = call("edit", path=path, old=wrong, new=fn, all=True)
        defect = Defect(path, fn, start, body[0], body[0].replace(wrong, fn))
        task = self.template("failing_test", check=check)
        plan = [call("bash", cmd=check), *look, fix]
        return self._multi("missing_name", lang, files, task, plan, check, defect, wrong=wrong)

    KINDS = (
        "operator", "off_by_one", "missing_return", "constant", "typo", "config",
        "add_line", "remove_line", "rename", "create", "add_test", "run_tests", "add_dep",
        "commit",
    )  # fmt: skip
    # Tasks of 4-6 steps that start from a failing check (issue 30).
    MULTI_STEP_KINDS = ("failing_test", "crash", "missing_file", "missing_name")

    def exercise(self, kind: str | None = None) -> Exercise:
        return getattr(self, kind or self.rng.choice(self.KINDS))()  # type: ignore[no-any-return]
