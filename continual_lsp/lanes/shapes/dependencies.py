"""Rule shapes of the tools a project uses: a library instead of another, the package
manager, the runner a command goes through and the wrapper it is called inside.
"""

from __future__ import annotations

import re

from continual_lsp.lanes.features import KNOWN_CLI
from continual_lsp.lanes.guards.spec import SEGMENT_START, CommandRule, ContentRule
from continual_lsp.lanes.shapes.kit import (
    DROP_IN,
    JS_MANAGERS,
    MANIFESTS,
    Shaped,
    backticked,
    bash_probe,
    import_re,
    negated,
    write_pair,
)


def dependency_shapes(text: str) -> list[Shaped]:
    """ "use the `ocrs` crate, not tesseract": the other library is never imported or added."""
    out: list[Shaped] = []
    for m in re.finditer(
        r"\buse\s+(?:the\s+)?`?(?P<good>[\w@/.-]+)`?\s+(?:crate|package|library|lib|module|gem)s?\b"
        r"[^.;]*?\b(?:not|instead of|rather than|over)\s+(?:the\s+)?`?(?P<bad>[\w@/.-]+)`?",
        text,
        re.I,
    ):
        bad, good = m.group("bad").rstrip("."), m.group("good").rstrip(".")
        if (
            bad.lower() in KNOWN_CLI
            or bad.lower() in ("a", "an", "the", "any", "it")
            or len(bad) < 3
        ):
            continue
        module = bad.replace("-", "_")
        out.append(
            write_pair(
                ContentRule(pattern=import_re(module)),
                "src/a.py",
                f"import {module}\n",
                f"import {good.replace('-', '_')}\n",
            )
        )
        out.append(
            write_pair(
                ContentRule(
                    pattern=rf"^\s*[\"']?{re.escape(bad)}[\"']?(?:\s*[=:<>~^\[]|\s*$)",
                    path_globs=MANIFESTS,
                ),
                "Cargo.toml",
                f'[dependencies]\n{bad} = "1"\n',
                f'[dependencies]\n{good} = "1"\n',
            )
        )
    return out


def program_pattern(program: str) -> str:
    """A program at the start of a command segment (after ;, &&, ||, |, `(` or `sudo`)."""
    return SEGMENT_START + re.escape(program) + r"(?=\s|$)"


def package_manager_shapes(text: str) -> list[Shaped]:
    """ "always use pnpm", "yarn is our package manager", "use `uv` for dependencies"."""
    t = text
    out: list[Shaped] = []
    for pm in (*JS_MANAGERS, "uv", "poetry"):
        q = rf"`?{pm}`?(?![\w-])"
        chosen = re.search(
            rf"\b(?:always|only)\s+(?:use\s+)?{q}|\buse\s+{q}(?!\s+(?:run|exec|dlx|x)\b)"
            rf"|(?<![\w-]){q}\s+(?:is|as)\s+(?:the|our)\s+(?:\w+\s+)?package manager"
            rf"|\bpackage manager\b[^.]*?(?<![\w-]){q}",
            t,
            re.I,
        )
        if not chosen or negated(t, pm):
            continue
        if pm in JS_MANAGERS:
            for other in JS_MANAGERS:
                if other == pm:
                    continue
                replace = r"\g<1>" + pm if pm in DROP_IN else None
                rule = CommandRule(pattern=program_pattern(other), replace=replace)
                out.append(
                    Shaped(rule, bash_probe(f"{other} install"), bash_probe(f"{pm} install"))
                )
        elif pm == "uv":
            for pip in ("pip", "pip3"):
                rule = CommandRule(pattern=program_pattern(pip), replace=r"\g<1>uv pip")
                out.append(
                    Shaped(rule, bash_probe(f"{pip} install x"), bash_probe("uv pip install x"))
                )
        else:
            rule = CommandRule(pattern=SEGMENT_START + r"pip3?\s+install\b")
            out.append(Shaped(rule, bash_probe("pip install x"), bash_probe("poetry add x")))
        break
    return out


def runner_shapes(text: str) -> list[Shaped]:
    """ "Use `uv run` for all Python commands", "run scripts through `poetry run`": the
    program is rewritten to run under the named runner."""
    m = re.search(
        r"\b(?:use|through|via|with)\s+`(?P<runner>[\w.-]+(?:\s+[\w.-]+)?)`\s+(?:for|to run)\s+"
        r"(?:all|every|any|each)\s+(?P<prog>\w+)\s+(?:commands?|scripts?|invocations?|calls?)\b",
        text,
        re.I,
    )
    if not m:
        return []
    runner, prog = m.group("runner"), m.group("prog").lower()
    programs = {"python": ["python", "python3"], "node": ["node"], "ruby": ["ruby"]}.get(
        prog, [prog] if prog in KNOWN_CLI else []
    )
    out = []
    for p in programs:
        if runner.split()[0] == p:
            continue
        rule = CommandRule(pattern=program_pattern(p), replace=rf"\g<1>{runner} {p}")
        out.append(
            Shaped(rule, bash_probe(f"{p} -m pytest"), bash_probe(f"{runner} {p} -m pytest"))
        )
    return out


def wrapper_shapes(text: str) -> list[Shaped]:
    """ "Tests on Linux require xvfb: `xvfb-run -a npm test`", "CLI commands run inside
    ddev: `ddev exec php craft ...`": the bare command is rewritten to the wrapped one."""
    out: list[Shaped] = []
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        if not re.search(
            r"\b(require[sd]?|must|always|only|should)\b|\ball\b[^.`]*\bcommands?\b",
            sentence,
            re.I,
        ):
            continue
        for span in backticked(sentence):
            if re.search(r"[;&|<>\\$]", span):
                continue
            words = span.replace("...", "").replace("\u2026", "").split()
            for i in range(1, len(words)):
                if words[i].lower() in KNOWN_CLI and words[i].lower() != words[0].lower():
                    inner, wrapper = " ".join(words[i:]), " ".join(words[:i])
                    pattern = SEGMENT_START + r"\s+".join(map(re.escape, words[i:])) + r"(?![\w-])"
                    rule = CommandRule(pattern=pattern, replace=rf"\g<1>{wrapper} {inner}")
                    out.append(Shaped(rule, bash_probe(inner), bash_probe(f"{wrapper} {inner}")))
                    break
    return out
