#!/usr/bin/env bash
# The GPU machine's side of the KernelBench campaign's final table (benchmarks/kernelbench_final.py): evaluate
# FINAL/pending.txt (written here by `kernelbench_final.py pending`) with one worker per GPU,
# streaming eval-batch --json into a file outside OUT that is copied to OUT/final.jsonl every 30 s
# and at the end, so a call cut by its limit still brings back every finished pair.
# Usage (carry .sandbox .kb FINAL): bash benchmarks/kernelbench_final.sh OUT FINAL [TIME_S]
# Back here: cp OUT/final.jsonl FINAL/results/call-N.jsonl, then `pending` again for what is left.
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0;; esac  # the comment above
set -uo pipefail
OUT=${1:?usage: kernelbench_final.sh OUT FINAL [TIME_S]}
FINAL=${2:?FINAL: the folder kernelbench_final.py prepare wrote}
T=${3:-540}
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac
source "$(dirname "$0")/_gpu_env.sh"
[ -s "$FINAL/pending.txt" ] || { echo "$FINAL/pending.txt is empty or missing: run kernelbench_final.py pending first" >&2; exit 2; }
mkdir -p "$OUT"
RES=$(mktemp /tmp/final.XXXXXX.jsonl)
copy() { cp "$RES" "$OUT/.final.tmp" && mv "$OUT/.final.tmp" "$OUT/final.jsonl"; }
gpu_facts | tee "$OUT/gpu.txt"
step "eval-batch --manifest $FINAL/pending.txt ($(wc -l < "$FINAL/pending.txt") pairs)"
( while sleep 30; do copy; done ) &
PACKER=$!
timeout "$T" python3 -m warpforge.cli eval-batch --manifest "$FINAL/pending.txt" --device cuda --json \
  > "$RES" 2> >(tail -20 > "$OUT/eval_batch.log")
kill "$PACKER" 2>/dev/null
copy
step "done: $(grep -c '^{' "$RES") results in $OUT/final.jsonl"
