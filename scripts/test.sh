#!/usr/bin/env bash
# README command 2: set up, then run every check: lint, format, the Python suite
# (real model, real Neovim, real SQLite) and the VS Code extension's checks and e2e.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
export TRL_EXPERIMENTAL_SILENCE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
if [ -x vscode-client/scripts/test.sh ] || [ -f vscode-client/scripts/test.sh ]; then
  bash vscode-client/scripts/test.sh
fi
