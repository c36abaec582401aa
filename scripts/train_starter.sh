#!/usr/bin/env bash
# Regenerate the starter curriculum and train the starter adapter (issue 13).
#
#   bash scripts/train_starter.sh [work dir]     (default: .starter-run)
#
# SITUATIONS (per shard, default 740: ~2,600 sequences in all), MAX_MINUTES (default:
# the recipe's 80), INIT_ADAPTER (start from that adapter, e.g. the shipped one,
# instead of a fresh one), MULTI_SHARE (the fraction of multi-step exercises; default
# each kind in turn, 4 of 17) and SEEDS (default "1 2") override the recipe from the
# environment.
#
# Two generation shards run side by side (~7 min on the 2-core build machine), then LoRA
# SFT on the call tokens for at most `max_minutes` (80). Rerunning resumes from the last
# checkpoint. The adapter lands in <work dir>/run/adapter; copy it into
# continual_lsp/data/starter/ to ship it.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${1:-.starter-run}"
PY="${PYTHON:-.venv/bin/python}"
export TRL_EXPERIMENTAL_SILENCE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$WORK"
shards=()
for seed in ${SEEDS:-1 2}; do
  shards+=("$WORK/shard$seed.jsonl")
  if [ ! -f "$WORK/shard$seed.jsonl" ]; then
    "$PY" -m continual_lsp.curriculum.train generate --situations "${SITUATIONS:-740}" --seed "$seed" \
      ${MULTI_SHARE:+--multi-share "$MULTI_SHARE"} --out "$WORK/shard$seed.jsonl" &
  fi
done
wait
"$PY" -m continual_lsp.curriculum.train train \
  --data "${shards[@]}" --out "$WORK/run" \
  ${MAX_MINUTES:+--max-minutes "$MAX_MINUTES"} ${INIT_ADAPTER:+--init-adapter "$INIT_ADAPTER"}
# The calls every SDPO step rehearses and is gated on (learning/anchors.py), beside the
# adapter they belong with; seed 11, which the shards above must not use.
"$PY" -m continual_lsp.curriculum.train anchors --out "$WORK/run/adapter/anchors.jsonl"
# The learning check (issue 33): a candidate that learns less from a deny-only reviewer
# than the shipped starter, or finishes fewer agent-skill tasks, stops the recipe here
# (set -e), before anyone copies it.
[ -n "${SKIP_LEARNING_CHECK:-}" ] || bash scripts/check_starter_learns.sh "$WORK/run/adapter" "$WORK/learning-check"
