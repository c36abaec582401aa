"""Globs, one syntax for the glob tool, the guards and the decoding limits.

`**`, `*`, `?`, `[...]` (`[!...]` negated, a leading `]` a member) and `{a,b}`; `*` and
`?` stop at `/`, `**` crosses directories and `**/` may match none. Patterns come from
the model or a reviewer's rule and run unreviewed, so they compile to RE2, which matches
in linear time (grep's regexes compile here too).
"""

from __future__ import annotations

import re

import re2

from continual_lsp.tools.base import ToolError


def _translate(pat: str) -> str:
    out: list[str] = []
    i, n = 0, len(pat)
    while i < n:
        c = pat[i]
        if pat.startswith("**", i):
            i += 2
            if i < n and pat[i] == "/":
                out.append("(?:.*/)?")  # `**/` also matches no directory at all
                i += 1
            else:
                out.append(".*")
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            start = i + 1
            if pat[start : start + 1] in ("!", "^"):
                start += 1
            if pat[start : start + 1] == "]":
                start += 1  # a leading `]` is a member, as in fnmatch
            close = pat.find("]", start)
            if close < 0:
                out.append(re.escape(c))
            else:
                body = pat[i + 1 : close]
                negate = body[:1] in ("!", "^")
                if negate:
                    body = body[1:]
                # Escape what Python's regex would read as a nested set or set operation.
                body = re.sub(r"([\\\[\]&~|])", r"\\\1", body)
                out.append(("[^/" if negate else "[") + body + "]")
                i = close
        elif c == "{":
            close = pat.find("}", i + 1)
            if close < 0 or "," not in pat[i + 1 : close]:
                out.append(re.escape(c))
            else:
                alts = pat[i + 1 : close].split(",")
                out.append("(?:" + "|".join(_translate(a) for a in alts) + ")")
                i = close
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def compile_re2(regex: str, what: str, pat: str) -> re2._Regexp:
    """`regex` compiled by RE2; an invalid one is a ToolError that names `what` and `pat`."""
    options = re2.Options()
    options.log_errors = False  # the error comes back to the model as a ToolError
    try:
        return re2.compile(regex, options)
    except re2.error as exc:
        detail = exc.args[0].decode("utf-8", "replace") if exc.args else "invalid"
        raise ToolError(
            f"invalid {what} {pat!r}: {detail} (RE2 syntax: no lookaround, no backreferences)"
        ) from None


def glob_regex(pat: str) -> re2._Regexp:
    """A compiled RE2 for a glob with `**`, `*`, `?`, `[...]` and `{a,b}`.

    `*` and `?` stop at `/`; `**` crosses directories; `**/` may match nothing.
    """
    return compile_re2(r"(?s:" + _translate(pat) + r")\z", "glob pattern", pat)


# A glob naming a whole directory, anchored at the workspace root: `vendor/`, `./a/b/**`.
_DIRECTORY_GLOB = re.compile(r"(?:\./)?([\w.-]+(?:/[\w.-]+)*)/(?:\*\*)?")


def directory_prefix(glob: str) -> str | None:
    """`vendor/**` -> `vendor/`; None unless the glob names a whole directory (`vendor/*.py`
    does not: a prefix would forbid more than the guard does)."""
    m = _DIRECTORY_GLOB.fullmatch(glob.strip())
    return m.group(1) + "/" if m else None


def path_matches(path: str, globs: list[str]) -> bool:
    """gitignore-like over the glob tool's glob syntax: a glob without '/' matches a
    basename anywhere; a trailing '/' means everything under it; a leading `./` or `/`
    anchors at the workspace root, as in `directory_prefix`."""
    p = path.replace("\\", "/").removeprefix("./")
    for g in globs:
        g = g.strip()
        anchored = g.startswith(("./", "/"))
        g = g.removeprefix("./").lstrip("/")
        if g.endswith("/"):
            g += "**"
        if "/" not in g and not anchored:
            g = "**/" + g
        if glob_regex(g).match(p):
            return True
    return False
