"""Fuzz the tool layer: any arguments give a ToolResult or a ToolError, nothing else,
and nothing outside the workspace is ever written."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from continual_lsp.config import Settings
from continual_lsp.tools import ToolCall, ToolError, ToolResult, ToolRunner
from tests.tools.conftest import SECRET, snapshot

_PATHS = st.one_of(
    st.sampled_from(
        [
            "a/file.txt",
            "a",
            "new/x.py",
            ".",
            "..",
            "../outside/secret.txt",
            "link_out/secret.txt",
            "link_secret",
            "a/up/outside/x",
            "/etc/passwd",
            "/",
            "~/.ssh/id_rsa",
            "bin.dat",
            "crlf.txt",
            "a/b",
        ]
    ),
    st.text(min_size=1, max_size=30),
    st.text(alphabet="./ab~\\", min_size=1, max_size=20),
)
_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 2_000_000),
    st.text(max_size=50),
    st.lists(st.integers(), max_size=2),
    st.floats(allow_nan=True),
)
_INTS = st.one_of(st.integers(-3, 30), st.integers(), _ANY)
_TEXT = st.one_of(st.text(max_size=60), st.sampled_from(["inside", "x", "\n", "", "\r\n"]), _ANY)
_REGEX = st.one_of(st.text(max_size=20), st.sampled_from(["(", "[a-", "inside", ".*", "*", "(?P<"]))
_GLOB = st.one_of(
    st.text(max_size=20), st.sampled_from(["*", "**/*", "../*", "/etc/*", "[", "{a,b}", "a/**"])
)


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(None), strategy)


_ARGS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "read": st.fixed_dictionaries(
        {"path": st.one_of(_PATHS, _ANY)},
        optional={"offset": _INTS, "limit": _INTS},
    ),
    "write": st.fixed_dictionaries({"path": st.one_of(_PATHS, _ANY), "content": _TEXT}),
    "edit": st.fixed_dictionaries(
        {"path": st.one_of(_PATHS, _ANY), "old": _TEXT, "new": _TEXT},
        optional={"all": _maybe(st.booleans())},
    ),
    "edit_lines": st.fixed_dictionaries(
        {"path": st.one_of(_PATHS, _ANY), "start": _INTS, "end": _INTS, "content": _TEXT}
    ),
    "glob": st.fixed_dictionaries({"pat": _GLOB}, optional={"path": _maybe(_PATHS)}),
    "grep": st.fixed_dictionaries({"pat": _REGEX}, optional={"path": _maybe(_PATHS)}),
}


@st.composite
def tool_calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    tool = draw(st.sampled_from(sorted(_ARGS)))
    arguments = draw(_ARGS[tool])
    if draw(st.integers(0, 9)) == 0:
        arguments[draw(st.text(min_size=1, max_size=5))] = draw(_ANY)  # stray key
    return tool, arguments


def _layout(root: Path, outside: Path) -> None:
    (root / "bin.dat").write_bytes(b"\x00\x01binary inside")
    (root / "crlf.txt").write_bytes(b"inside\r\nx\r\n")


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzz_tool_layer(jail_layout: tuple[Path, Path], data: st.DataObject) -> None:
    root, outside = jail_layout
    if not (root / "bin.dat").exists():
        _layout(root, outside)
    before = snapshot(outside)
    ws = ToolRunner(root, Settings(sandbox="none", output_cap=2000))
    tool, arguments = data.draw(tool_calls())
    call = ToolCall(tool=tool, arguments=arguments)  # type: ignore[arg-type]
    try:
        preview = ws.preview(call)
        result = ws.execute(call, preview=preview)
    except ToolError:
        pass
    else:
        assert isinstance(result, ToolResult)
        assert SECRET not in result.output
        assert len(result.output) <= 2000 + 300  # the cap plus its note
    assert snapshot(outside) == before


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    text=st.text(max_size=40), timeout=st.one_of(st.none(), st.integers(-2, 3), st.text(max_size=3))
)
def test_fuzz_bash_arguments(tmp_path: Path, text: str, timeout: Any) -> None:
    """bash with odd text and timeouts: a result or a ToolError, never a crash."""
    ws = ToolRunner(tmp_path, Settings(sandbox="none", bash_timeout=5))
    arguments: dict[str, Any] = {"cmd": f"printf %s {shlex.quote(text)}"}
    if timeout is not None:
        arguments["timeout"] = timeout
    try:
        result = ws.execute(ToolCall(tool="bash", arguments=arguments))
    except ToolError:
        return
    assert result.ok
    printed = text.replace("\x00", "")
    # Whitespace-only output (e.g. a lone "\r") is reported as "(no output)" by design.
    expected = printed if printed.strip() else "(no output)"
    assert result.output == expected or "\x00" in text
