#!/usr/bin/env bash
# README command 1: set up, then run the main job on the embedded default model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/continual-lsp demo "$@"
