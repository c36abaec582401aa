"""One glob syntax for the glob tool, the guards' paths and the decoding limits."""

from __future__ import annotations

import pytest

from continual_lsp.tools.base import ToolError
from continual_lsp.tools.globs import directory_prefix, glob_regex, path_matches


def test_glob_regex_translation() -> None:
    assert glob_regex("**/*.py").match("a.py")
    assert glob_regex("**/*.py").match("x/y/a.py")
    assert not glob_regex("*.py").match("x/a.py")
    assert glob_regex("[!a]b").match("cb") and not glob_regex("[!a]b").match("ab")
    assert glob_regex("[]x]").match("]")
    assert glob_regex("a?c").match("abc") and not glob_regex("a?c").match("a/c")
    assert glob_regex("src/{a,b}.py").match("src/b.py")
    assert not glob_regex("src/{a,b}.py").match("src/{a,b}.py")


def test_path_matches_is_gitignore_like() -> None:
    assert path_matches("src/x/a.css", ["*.css"])
    assert path_matches("vendor/a/b.py", ["vendor/**"])
    assert not path_matches("src/vendor.py", ["vendor/**"])
    assert path_matches("pubspec.yaml", ["pubspec.yaml"])
    assert path_matches("app/pubspec.yaml", ["pubspec.yaml"])
    assert path_matches("a.py", ["./a.py"]) and not path_matches("src/a.py", ["./a.py"])


@pytest.mark.parametrize(
    "glob", ["vendor/", "vendor/**", "./vendor/**", "a/b.c/**", "node_modules/"]
)
def test_a_directory_prefix_covers_what_the_guard_covers(glob: str) -> None:
    # The decoding limit forbids every path under the prefix: the guard must block them all.
    prefix = directory_prefix(glob)
    assert prefix is not None
    for rest in ("x.py", "deep/er/y.txt"):
        assert path_matches(prefix + rest, [glob]), (glob, prefix + rest)
    assert not path_matches("elsewhere/" + prefix + "x.py", [glob])


@pytest.mark.parametrize(
    "glob", ["vendor/*.py", "v[ae]ndor/", "{vendor,lib}/", "vendor/**/*.py", "*/", "ven?or/"]
)
def test_a_glob_with_wildcards_names_no_directory(glob: str) -> None:
    # `[]` and `{}` are glob syntax here as in the glob tool, never a directory's name.
    assert directory_prefix(glob) is None


def test_an_invalid_glob_is_a_tool_error() -> None:
    with pytest.raises(ToolError, match="glob pattern"):
        glob_regex("[z-a]")
