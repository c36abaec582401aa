#!/usr/bin/env bash
# The extension's checks, in order: install from the lock file, type-check, lint, unit tests,
# build, package the .vsix. Needs Node ≥ 20 and the npm registry (or a warm npm cache).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { echo; echo "== $*"; }

step "npm ci"
npm ci --no-audit --no-fund --loglevel=error
step "typecheck (tsc --noEmit)"
npx tsc --noEmit
step "lint (eslint)"
npx eslint --max-warnings 0 .
step "unit tests (vitest)"
npx vitest run
step "build (esbuild)"
node esbuild.mjs --production
step "package (vsce)"
npx vsce package --no-dependencies --skip-license --allow-missing-repository --out dist/continual-lsp.vsix
unzip -l dist/continual-lsp.vsix | tail -n +1
echo
echo "vscode-client: all checks passed ($(ls -l dist/continual-lsp.vsix | awk '{print $5}') bytes .vsix)"
