"""Scenario files: validation that names the field, the declarative check, `check` CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from continual_lsp.agent.scenarios import (
    Check,
    ScenarioFileError,
    judge_text,
    load_scenario_file,
)
from continual_lsp.cli import main

REPO = Path(__file__).resolve().parents[2]
PACKAGE_MANAGER = REPO / "bench" / "learning" / "scenarios" / "package_manager.json"


def _write(tmp_path: Path, data: Any, name: str = "s.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _valid() -> dict[str, Any]:
    data = json.loads(PACKAGE_MANAGER.read_text())
    workspace = str(REPO / "examples" / "bench-workspaces" / "web-app")
    for key in ("train", "held_out"):
        for situation in data[key]:
            situation["workspace"] = workspace
    return data


def test_the_bench_files_load(tmp_path: Path) -> None:
    for name in ("tool_choice", "package_manager", "logging", "scope"):
        scenario = load_scenario_file(REPO / "bench" / "learning" / "scenarios" / f"{name}.json")
        assert scenario.name == name and len(scenario.held_out) >= 4
    commit = load_scenario_file(REPO / "bench" / "learning" / "scenarios" / "commit_message.json")
    assert commit.off_task is not None and commit.off_task.passes("done", {"summary": "ok"})


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["train"][2]["demonstration"].pop("tool"), "train.2.demonstration.tool"),
        (lambda d: d["check"].update(tool_in=["shell"]), "check.tool_in"),
        (lambda d: d.update(off_task={"tool_in": ["finish"]}), "off_task.tool_in"),
        (lambda d: d["check"].update(argument_matches={"cmd": "pnpm("}), "check.argument_matches"),
        (lambda d: d.update(max_tokens=0), "max_tokens"),
        (lambda d: d["held_out"][1].update(colour="red"), "held_out.1.colour"),
        (lambda d: d["held_out"][0].update(workspace="nowhere"), "held_out.0.workspace"),
    ],
)
def test_a_malformed_file_gets_an_error_naming_the_field(
    tmp_path: Path, change: Any, field: str
) -> None:
    data = _valid()
    change(data)
    with pytest.raises(ScenarioFileError, match=re.escape(f"s.json: {field}")):
        load_scenario_file(_write(tmp_path, data))


def test_not_json_or_missing_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{name: ")
    with pytest.raises(ScenarioFileError, match=r"bad\.json: not valid json"):
        load_scenario_file(bad)
    with pytest.raises(ScenarioFileError, match="cannot read"):
        load_scenario_file(tmp_path / "absent.json")


def test_toml_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(
        'name = "t"\ntitle = "t"\nrule = "r"\ntools = ["bash"]\nmax_tokens = 20\n'
        '[check]\ntool_in = ["bash"]\n[[held_out]]\nid = "h"\nworkspace = "."\n'
        'task = "x"\ncorrection = "c"\n'
        'demonstration = {tool = "bash", arguments = {cmd = "ls"}}\n'
        'violation = {tool = "read", arguments = {path = "a"}}\n'
    )
    scenario = load_scenario_file(path)
    assert scenario.name == "t" and scenario.workspace(scenario.held_out[0]) == tmp_path


def test_the_declarative_check() -> None:
    pnpm = Check(tool_in=["bash"], argument_matches={"cmd": r"^\s*pnpm(\s|$)"})
    assert pnpm.passes("bash", {"cmd": "pnpm add x"})
    assert not pnpm.passes("bash", {"cmd": "npm add x"})
    assert not pnpm.passes("bash", {"cmd": "pnpmx"})
    assert not pnpm.passes("write", {"cmd": "pnpm add x"})
    log = Check(
        argument_matches={"content|new": r"logger\."},
        argument_not_matches={"content|new": r"print\("},
    )
    assert log.passes("edit", {"new": "logger.info(x)"})
    assert not log.passes("edit", {"new": "logger.info(x); print(x)"})
    assert not log.passes("write", {})
    scope = Check(tool_not_in=["bash"], path_not_under=["vendor/"])
    assert scope.passes("edit", {"path": "src/x.py"})
    assert not scope.passes("edit", {"path": "./vendor/x.py"})
    assert not scope.passes("edit", {})  # no path written: not compliant
    assert Check(path_under=["src/"]).passes("write", {"path": "src/a"})
    cut = judge_text('{"tool":"bash","arguments":{"cmd":"pnpm ad')
    assert pnpm.passes(cut.tool, cut.arguments)


def test_check_cli_refuses_a_malformed_file_before_loading_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _valid()
    del data["check"]
    path = _write(tmp_path, data)
    assert main(["check", "--store", str(tmp_path / "s.sqlite3"), str(path)]) == 1
    assert "s.json: check: Field required" in capsys.readouterr().err


@pytest.mark.model
def test_check_cli_prints_compliance_with_the_current_adapter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _valid()
    data["held_out"] = data["held_out"][:1]
    path = _write(tmp_path, data)
    assert main(["check", "--store", str(tmp_path / "s.sqlite3"), str(path)]) == 0
    out = capsys.readouterr().out
    assert "package_manager: " in out and "held-out situations comply" in out
    assert "with base model" in out
