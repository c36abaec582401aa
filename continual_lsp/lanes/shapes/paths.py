"""Rule shapes of names and places: file and directory name cases, paths never written
(or only existing ones changed), where files of a kind go, and files read before a change.
"""

from __future__ import annotations

import re

from continual_lsp.lanes.features import FILE_TYPES
from continual_lsp.lanes.guards.spec import NamingRule, PathRule, ReadFirstRule
from continual_lsp.lanes.shapes.kit import (
    CASE_EXAMPLE,
    CASES,
    FILE_KINDS,
    Probe,
    Shaped,
    backticked,
    dir_globs,
    example_path,
    globs_of,
    languages_of,
    new_ones_allowed,
    write_probe,
)
from continual_lsp.tools.base import Preview, ToolCall


def naming_shapes(text: str) -> list[Shaped]:
    t = text
    target = (
        "directory"
        if re.search(r"\b(director(y|ies)|folders?)\b", t, re.I)
        else "file"
        if re.search(r"\bfiles?\b|\.\w{1,4}\b", t, re.I)
        else None
    )
    if target is None:
        return []
    out = []
    for style, rx in CASES:
        if re.search(rx, t, re.I):
            globs = [g for g in languages_of(t) if g.startswith("*.")]
            bad, good = CASE_EXAMPLE[style]
            ext = globs[0][1:] if globs else ".ts"
            if target == "file":
                b, g = f"src/{bad}{ext}", f"src/{good}{ext}"
            else:
                b, g = f"src/{bad}/index{ext}", f"src/{good}/index{ext}"
            rule = NamingRule(style=style, target=target, path_globs=globs)
            out.append(Shaped(rule, write_probe(b, "x\n"), write_probe(g, "x\n")))
            break
    return out


# -- paths -----------------------------------------------------------------------------------


PATH_PROHIBITION = re.compile(
    r"\b(do not|don'?t|never)\s+(hand[- ]?)?(edit|modify|write|touch|change)\b"
    r"|\bhand[- ]?(edit|writ)\w*\b|\b(?:is|are)\s+(?:auto-?)?generated\b",
    re.I,
)


def _path_globs(text: str) -> list[str]:
    globs = [g for g in globs_of(text) if not g.startswith(("http", "npx"))]
    return globs + [g for g in backticked(text) if g.startswith("*.") and g not in globs]


# Where one instruction ends and the next begins: a sentence, a semicolon, or a comma
# before a new imperative or "instead" ("don't edit it by hand, run `pnpm gen` in web/").
INSTEAD_CUT = (
    r";|\.\s+(?=[A-Z`])|,\s*(?:and\s+|but\s+)?(?=(?:run|use|add|put|write|create|call|fix|"
    r"make|let|go)\b)|\binstead\b"
)


def path_shapes(text: str) -> list[Shaped]:
    """ "`src/ui/` is generated, do not hand-edit", "Avoid: `*.Designer.cs` (auto-generated)".

    The paths are read from the clause that holds the prohibition: "never edit vendor/;
    make the change under src/" forbids vendor/ only, and a new instruction after a comma
    ("…, run `pnpm gen` in web/") is what to do instead. A prohibition whose clause names no
    path ("Generated code lives in `gen/`. Never hand-edit it.") takes the paths of the
    clauses before it, where "it" points; "X is generated from Y" forbids X, not Y."""
    avoid = re.search(r"\bavoid\b", text, re.I) and re.search(r"\bgenerated\b", text, re.I)
    if not (PATH_PROHIBITION.search(text) or avoid):
        return []
    if avoid:
        t = text
    else:
        clauses = [c for c in re.split(INSTEAD_CUT, text) if c]
        first = next((i for i, c in enumerate(clauses) if PATH_PROHIBITION.search(c)), 0)
        t = next(
            (c for c in clauses if PATH_PROHIBITION.search(c) and _path_globs(c)),
            " ".join(clauses[:first]),
        )
        generated = re.search(r"\b(?:is|are)\s+(?:auto-?)?generated\b", t, re.I)
        if generated and _path_globs(t[: generated.start()]):
            t = t[: generated.start()]
    globs = _path_globs(t)
    if not globs:
        return []
    # With several paths, the one the prohibition governs comes last ("`src/components/`
    # (app), `src/components/ui/` (do not hand-edit)"); a backticked path is the named one.
    ticked = [g for g in globs if f"`{g.removesuffix('**')}`" in t or f"`{g}`" in t]
    last = (ticked or globs)[-1:]
    target = last if len(globs) > 1 and not re.search(r"\bavoid\b", t, re.I) else globs
    target = dir_globs(target)
    literal = next((g for g in target if "*" not in g), None)
    inside = literal or example_path(target, "x.txt").replace("**", "x").replace("*", "x")
    if new_ones_allowed(t, text):
        return [existing_only_shape(PathRule(globs=target, existing_only=True))]
    rule = PathRule(globs=target)
    return [Shaped(rule, write_probe(inside, "x\n"), write_probe("elsewhere/ok.txt", "x\n"))]


def existing_only_shape(rule: PathRule) -> Shaped:
    """Violating: a write over a file that exists there; compliant: a new file there."""
    base = rule.globs[-1].replace("/**", "").replace("*", "x")
    old = f"{base}/0001_old.py" if rule.globs[-1].endswith("/**") else base
    preview = Preview(path=old, old_content="old\n", new_content="x\n", diff="", old_sha256=None)
    over = Probe(ToolCall(tool="write", arguments={"path": old, "content": "x\n"}), [], preview)
    new = f"{base}/0002_new.py" if rule.globs[-1].endswith("/**") else "elsewhere/new.py"
    return Shaped(rule, over, write_probe(new, "x\n"))


def placement_shapes(text: str) -> list[Shaped]:
    """ "Use Jupyter notebooks in the `notebooks/` directory", "tests go in `tests/`":
    files of that kind are written only under the directory."""
    where = r"(?:the\s+)?`?(?P<{}>[\w.-]+(?:/[\w.-]+)*/)`?"
    m = re.search(
        r"\b(?:put|keep|place|store|save|create|add|write|use)\s+(?:(?:all|new|any|the)\s+)*"
        r"(?:[\w-]+\s+){0,2}?(?P<kind>[\w-]+?)s?\s+(?:files?\s+)?(?:only\s+)?"
        r"(?:in|under|inside|into)\s+" + where.format("dir") + r"|\b(?P<kind2>[\w-]+?)s?\s+"
        r"(?:files?\s+)?(?:(?:must|should)\s+(?:go|belong|live|be kept|be placed)|go|belong)\s+(?:only\s+)?"
        r"(?:in|under|inside)\s+" + where.format("dir2"),
        text,
        re.I,
    )
    if not m:
        return []
    kind = (m.group("kind") or m.group("kind2")).lower()
    folder = m.group("dir") or m.group("dir2")
    files = FILE_KINDS.get(kind) or ([FILE_TYPES[kind]] if kind in FILE_TYPES else [])
    if not files:
        return []
    rule = PathRule(globs=[folder + "**"], mode="allow", tools=["write"], files=files)
    name = files[0].replace("*", "example")
    return [Shaped(rule, write_probe(name, "x\n"), write_probe(folder + name, "x\n"))]


def read_first_shapes(text: str) -> list[Shaped]:
    """ "Always read `docs/prd.md` before implementing", "Read AGENTS.md first"."""
    m = re.search(
        r"(?:^|[.;:]\s+|\b(?:always|must|should|first)\s+)read(?![\w-])(?P<what>[^.;]*(?:\.\w[^.;]*)*)",
        text,
        re.I,
    )
    if not m or not re.search(r"\b(always|first|before|must|start\w*|when working)\b", text, re.I):
        return []
    paths = [g for g in globs_of(m.group("what")) if "*" not in g and "." in g.rsplit("/", 1)[-1]]
    if not paths:
        return []
    reads = [ToolCall(tool="read", arguments={"path": p}) for p in paths]
    change = ToolCall(tool="write", arguments={"path": "src/a.py", "content": "x\n"})
    return [
        Shaped(ReadFirstRule(paths=paths), Probe(change), Probe(change, reads)),
    ]
