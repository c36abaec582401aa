"""The workspace jail: no path, however spelled, reaches outside the root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from continual_lsp.config import Settings
from continual_lsp.tools import PathEscapeError, ToolCall, ToolError, ToolRunner
from continual_lsp.tools.jail import display, resolve
from tests.tools.conftest import SECRET, snapshot


def test_relative_paths_resolve_inside(jail_layout: tuple[Path, Path]) -> None:
    root, _ = jail_layout
    assert resolve(root, "a/file.txt") == root / "a" / "file.txt"
    assert resolve(root, "./a/b/../file.txt") == root / "a" / "file.txt"
    assert resolve(root, "a/b/new.txt") == root / "a" / "b" / "new.txt"  # may not exist yet
    assert resolve(root, ".") == root
    assert resolve(root, str(root / "a")) == root / "a"  # absolute but inside
    assert resolve(root, "link_in/file.txt") == root / "a" / "file.txt"  # symlink that stays in


@pytest.mark.parametrize(
    "path",
    [
        "..",
        "../outside/secret.txt",
        "a/../../outside",
        "a/b/../../../x",
        "/etc/passwd",
        "/",
        "link_out",
        "link_out/secret.txt",
        "link_secret",
        "a/up/outside/secret.txt",
        "link_in/up",
        "dangling_out",
        "rel_out",
        "~/.ssh/id_rsa",
        "~",
    ],
)
def test_escapes_are_refused(jail_layout: tuple[Path, Path], path: str) -> None:
    root, _ = jail_layout
    with pytest.raises(PathEscapeError) as err:
        resolve(root, path)
    assert "outside" in str(err.value) or "home" in str(err.value)


@pytest.mark.parametrize("path", ["", "a\x00b", "bad\ud800name"])
def test_invalid_path_text(jail_layout: tuple[Path, Path], path: str) -> None:
    root, _ = jail_layout
    with pytest.raises(ToolError):
        resolve(root, path)


def test_display_paths_are_relative_posix(jail_layout: tuple[Path, Path]) -> None:
    root, _ = jail_layout
    assert display(root, root / "a" / "b" / "c.txt") == "a/b/c.txt"
    assert display(root, root) == "."
    assert display(root, "a/file.txt") == "a/file.txt"


def test_root_given_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    ws = ToolRunner(tmp_path / "alias", Settings(sandbox="none"))
    assert ws.root == real
    assert ws.rel(ws.resolve(str(tmp_path / "alias" / "x.txt"))) == "x.txt"


# -- property tests ------------------------------------------------------------------

_SEGMENTS = st.sampled_from(
    [
        "..",
        ".",
        "",
        "a",
        "b",
        "file.txt",
        "link_out",
        "link_in",
        "link_secret",
        "up",
        "dangling_out",
        "rel_out",
        "outside",
        "secret.txt",
        "new.txt",
        "~",
        "...",
        " ",
        "a b",
        "\\..",
        "..\\..",
    ]
)


@st.composite
def weird_paths(draw: st.DrawFn, root: Path, outside: Path) -> str:
    prefix = draw(st.sampled_from(["", "", "/", "./", f"{root}/", f"{outside}/", "/etc/", "//"]))
    segments = draw(st.lists(_SEGMENTS, min_size=1, max_size=7))
    return prefix + "/".join(segments)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_resolve_never_leaves_the_root(jail_layout: tuple[Path, Path], data: st.DataObject) -> None:
    root, outside = jail_layout
    path = data.draw(weird_paths(root, outside))
    try:
        resolved = resolve(root, path)
    except ToolError:
        return
    real = Path(os.path.realpath(resolved))
    assert real == root or real.is_relative_to(root), (path, real)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_tools_never_touch_outside(jail_layout: tuple[Path, Path], data: st.DataObject) -> None:
    """read / write / edit / edit_lines / grep / glob on weird paths: outside stays intact
    and its secret never shows up in an output."""
    root, outside = jail_layout
    before = snapshot(outside)
    ws = ToolRunner(root, Settings(sandbox="none"))
    path = data.draw(weird_paths(root, outside))
    tool = data.draw(st.sampled_from(["read", "write", "edit", "edit_lines", "grep", "glob"]))
    arguments: dict[str, object] = {
        "read": {"path": path},
        "write": {"path": path, "content": "pwned\n"},
        "edit": {"path": path, "old": "OUTSIDE", "new": "pwned", "all": True},
        "edit_lines": {"path": path, "start": 1, "end": 1, "content": "pwned"},
        "grep": {"pat": "SECRET", "path": path},
        "glob": {"pat": "*", "path": path},
    }[tool]
    try:
        call = ToolCall(tool=tool, arguments=arguments)
        preview = ws.preview(call)
        if preview is not None:
            assert SECRET not in preview.diff
        result = ws.execute(call, preview=preview)
        assert SECRET not in result.output
    except ToolError:
        pass
    assert snapshot(outside) == before
