"""The VS Code extension's wire types are held to the pydantic models: the committed JSON
Schema is the models' own (the extension's test/wire.test.ts holds wire.ts to it), and its
method names are protocol.py's."""

from __future__ import annotations

import json
import re
from pathlib import Path

from continual_lsp import protocol

CORE = Path(__file__).resolve().parents[1] / "vscode-client" / "src" / "core"
REGENERATE = "run `bash vscode-client/scripts/protocol.sh` and commit the result"


def test_the_extensions_schema_is_the_models_schema() -> None:
    committed = json.loads((CORE / "wire.schema.json").read_text(encoding="utf-8"))
    assert committed == protocol.json_schema(), REGENERATE


def test_every_model_is_in_the_schema_without_nulls() -> None:
    definitions = protocol.json_schema()["$defs"]
    assert {"ProposalNotification", "DecideParams", "StatusResult"} <= set(definitions)
    # `Wire.dump` leaves an unset field out: the schema must not allow null instead.
    proposal = definitions["ProposalNotification"]
    assert proposal["properties"]["uri"] == {"type": "string"}
    assert "uri" not in proposal["required"]
    assert "null" not in json.dumps(definitions)


def test_the_extensions_method_names_are_the_servers() -> None:
    text = (CORE / "protocol.ts").read_text(encoding="utf-8")
    names = dict(re.findall(r'export const ((?:METHOD|NOTIFY)_\w+) = "([^"]+)";', text))
    expected = {
        name: value
        for name, value in vars(protocol).items()
        if name.startswith(("METHOD_", "NOTIFY_"))
    }
    assert names == expected
