#!/usr/bin/env bash
# The recipe's learning check (issue 33): a candidate starter ships only if it learns from
# a deny-only reviewer at least as much as the starter it replaces.
#
#   bash scripts/check_starter_learns.sh <candidate adapter dir> [work dir]
#
# Runs `bench/learning/through_agent.py --reviewer deny` on the dev scenarios
# (DEV_SCENARIOS in bench/learning/scenarios.py; SCENARIOS overrides, e.g. "all") for the
# shipped adapter (continual_lsp/data/starter) and for the candidate, five corrections
# each (CORRECTIONS overrides), prints both numbers and exits 1, "not shipped: learns
# less than the one it replaces", when the candidate's mean weights-only held-out
# compliance at the 5th correction is lower, or when `bench/agent_skill.py` finishes
# fewer of its one-step or multi-step tasks with it (bench/learning/learning_check.py
# decides). Each learning run loads the model and takes SDPO steps, and each skill run
# walks 60 tasks: about 15-20 minutes apiece on 2 cores.
#
# scripts/train_starter.sh runs this after its train step, so `set -e` stops the recipe
# before anyone copies a candidate that learns less (SKIP_LEARNING_CHECK=1 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
CANDIDATE="${1:?usage: check_starter_learns.sh <candidate adapter dir> [work dir]}"
WORK="${2:-.learning-check}"
PY="${PYTHON:-.venv/bin/python}"
export TRL_EXPERIMENTAL_SILENCE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ ! -f "$CANDIDATE/adapter_model.safetensors" ]; then
  echo "check_starter_learns: no adapter in $CANDIDATE" >&2
  exit 2
fi
mkdir -p "$WORK"
run() {  # $1: tag, $2...: extra flags
  local tag="$1"
  shift
  # shellcheck disable=SC2086
  "$PY" bench/learning/through_agent.py --reviewer deny --scenarios ${SCENARIOS:-dev} \
    --corrections "${CORRECTIONS:-5}" --tag "check-$tag" --summary "$WORK/$tag.json" "$@"
}
skill() {  # $1: tag, $2...: extra flags
  local tag="$1"
  shift
  "$PY" bench/agent_skill.py --policies starter --skill-only --out "$WORK/skill-$tag.json" "$@"
}
run shipped
run candidate --adapter "$CANDIDATE"
skill shipped
skill candidate --adapter "$CANDIDATE"
"$PY" bench/learning/learning_check.py "$WORK/shipped.json" "$WORK/candidate.json" \
  "$WORK/skill-shipped.json" "$WORK/skill-candidate.json"
