#!/usr/bin/env bash
# README command 2: set up, then run every check: lint and format, the import layers, the
# VS Code extension (type-check, lint, unit tests, .vsix, and the end-to-end run in a real
# code-server through Chromium on the embedded model, and the review flows on a scripted
# server), then the Python suite (real model,
# real SQLite, real Neovim, real bubblewrap).
#
#   bash scripts/test.sh --fast [pytest args]   the inner loop: ruff, lint-imports and the
#                                                tests that need no model, editor or browser
#                                                and take under 4 s (not `slow`)
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi
bash scripts/setup.sh --test
export TRL_EXPERIMENTAL_SILENCE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# The layer contracts in pyproject.toml: server -> agent -> {lanes, learning} -> policy -> ...
.venv/bin/lint-imports
if [ "$fast" = 1 ]; then
  exec .venv/bin/python -m pytest -q -p no:cacheprovider -n auto \
    -m "not model and not nvim and not emacs and not vscode and not slow" "$@"
fi
# A failed VS Code check does not stop the Python suite from running: every failure is
# reported, and the script fails at the end if any did.
# CI keeps only the tail of the output, where pytest's report is: each VS Code check's log
# is kept, and the failed checks' FAIL lines are printed again at the very end.
failed=()
logs="$(mktemp -d)"
check() {
  local name="$1"
  shift
  "$@" 2>&1 | tee "$logs/$name.log" || failed+=("$name")
}
if [ "${CONTINUAL_SKIP_VSCODE:-0}" != 1 ]; then
  check "vscode-unit" bash vscode-client/scripts/test.sh
  check "vscode-e2e" bash vscode-client/scripts/e2e.sh
  # Per-hunk decisions, always allow and undo in code-server, on the scripted server.
  check "vscode-review-e2e" env E2E_MODE=review E2E_SKIP_PACKAGE=1 bash vscode-client/scripts/e2e.sh
fi
.venv/bin/python -m pytest -q -p no:cacheprovider "$@" || failed+=("pytest")
if [ "${#failed[@]}" -gt 0 ]; then
  for name in "${failed[@]}"; do
    if [ -f "$logs/$name.log" ]; then
      echo "--- $name: what failed ---" >&2
      grep -E "FAIL|failed|timed out|Error" "$logs/$name.log" | tail -n 20 >&2 || tail -n 20 "$logs/$name.log" >&2
    fi
  done
  echo "test.sh: failed: ${failed[*]}" >&2
  exit 1
fi
