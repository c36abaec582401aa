#!/usr/bin/env bash
# End-to-end test of the VS Code extension in a real VS Code (code-server) through Chromium.
#
#   vscode-client/scripts/e2e.sh            full scenario on the real server + embedded model
#   E2E_MODE=smoke vscode-client/scripts/e2e.sh   the extension activates, no server needed
#
# Installs what it needs, idempotently: Debian's chromium and libkrb5-dev (apt), Node 24 and
# code-server 4.139 from npm into a cache outside the repo ($CONTINUAL_E2E_CACHE, default
# ~/.cache/continual-lsp/vscode-e2e; about 3 min and 620 MB the first time). Then packages the
# extension (.vsix), installs it into a throwaway code-server profile and runs e2e/run.mjs.
# Screenshots and logs: vscode-client/test-output/e2e/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$here/.." && pwd)"
cache="${CONTINUAL_E2E_CACHE:-$HOME/.cache/continual-lsp/vscode-e2e}"
code_server_version="${CODE_SERVER_VERSION:-4.139.1}"
mkdir -p "$cache"

say() { echo "[e2e.sh] $*"; }

# -- system packages ---------------------------------------------------------------------------
need_apt=()
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
dpkg -s libkrb5-dev >/dev/null 2>&1 || need_apt+=(libkrb5-dev)
if [ "${#need_apt[@]}" -gt 0 ]; then
  say "apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# -- Node 24 (code-server needs it; the extension's own build stays on the system Node) ------------
node24="$cache/node24/node_modules/node/bin/node"
if ! [ -x "$node24" ] || ! "$node24" --version | grep -q '^v24\.'; then
  say "npm i node@24 → $cache/node24"
  mkdir -p "$cache/node24"
  (cd "$cache/node24" && { [ -f package.json ] || echo '{"private":true}' > package.json; } && npm i --no-audit --no-fund --loglevel=error node@24)
fi
node24_bin="$(dirname "$node24")"

# -- code-server -----------------------------------------------------------------------------
code_server="$cache/code-server/node_modules/.bin/code-server"
if ! [ -x "$code_server" ] || ! PATH="$node24_bin:$PATH" "$code_server" --version 2>/dev/null | grep -q "^$code_server_version"; then
  say "npm i code-server@$code_server_version → $cache/code-server (about 3 min)"
  mkdir -p "$cache/code-server"
  (cd "$cache/code-server" && { [ -f package.json ] || echo '{"private":true}' > package.json; } \
    && PATH="$node24_bin:$PATH" npm i --no-audit --no-fund --loglevel=error "code-server@$code_server_version")
fi

# -- the extension -----------------------------------------------------------------------------
cd "$here"
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  say "npm ci"
  npm ci --no-audit --no-fund --loglevel=error
fi
if [ "${E2E_SKIP_PACKAGE:-0}" != "1" ] || [ ! -f dist/continual-lsp.vsix ]; then
  say "packaging the extension"
  npm run --silent package >/dev/null
fi

# -- the server (full mode) ----------------------------------------------------------------------
python="${PYTHON:-$repo/.venv/bin/python}"
if [ "${E2E_MODE:-full}" = "full" ]; then
  if [ "${E2E_SERVER:-model}" != "stub" ] && ! "$python" -c "import continual_lsp.server.main" 2>/dev/null; then
    echo "[e2e.sh] $python cannot import continual_lsp.server: create the project venv first" >&2
    exit 2
  fi
fi

say "running e2e/run.mjs (mode ${E2E_MODE:-full})"
CODE_SERVER="$code_server" PATH="$node24_bin:$PATH" PYTHON="$python" \
  "$node24" "$here/e2e/run.mjs"
