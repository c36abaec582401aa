#!/usr/bin/env bash
# Regenerate the extension's wire types from the pydantic models, in two steps:
# continual_lsp/protocol.py → src/core/wire.schema.json (JSON Schema) → src/core/wire.ts
# (json-schema-to-typescript). Run it after changing a wire model: tests/test_protocol.py
# and test/wire.test.ts fail until the committed files match.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-../.venv/bin/python}
"$PY" -c 'import json
from continual_lsp.protocol import json_schema
print(json.dumps(json_schema(), indent=2, ensure_ascii=False))' > src/core/wire.schema.json
node scripts/wire.mjs
