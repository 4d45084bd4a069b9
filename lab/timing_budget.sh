#!/usr/bin/env bash
# Issue 21: what a smaller timing budget buys and costs on a GPU, on one GPU, one step after the other
# until the deadline:
#   1. one Judge's seconds per candidate on level1/relu at --rep-ms 100 (the default), 25 and 10
#      (benchmarks/judge_turnaround.py, 7 evaluations each) -> OUT/judge_turnaround.jsonl;
#   2. the A/A of the suite's level 1, then levels 2-3, at --rep-ms 25 (warpforge calibrate)
#      -> OUT/aa_rep25_level1.jsonl, OUT/aa_rep25_level23.jsonl.
# The A/A at the default budget on the same GPU kind is benchmarks/results/kernelbench_h100_2026-11-25/aa_suite*.jsonl.
# Usage: [CUDA_VISIBLE_DEVICES=3] [BUDGETS="100 25 10"] bash lab/timing_budget.sh OUT_DIR [SECONDS]
set -uo pipefail
OUT=${1:?usage: timing_budget.sh OUT_DIR [SECONDS]}
T=${2:-540}
source "$(dirname "$0")/../benchmarks/_gpu_env.sh"
mkdir -p "$OUT"
END=$(( $(date +%s) + T ))
left() { echo $(( END - $(date +%s) )); }
for ms in ${BUDGETS:-100 25 10}; do
  step "turnaround at rep_ms=$ms ($(left) s left)"
  timeout "$(left)" python3 benchmarks/judge_turnaround.py --out "$OUT" --device cuda --label "rep_ms=$ms" \
    --rep-ms "$ms" --n 7 2>&1 | tail -1
done
step "A/A level 1 at rep_ms=25 ($(left) s left)"
timeout "$(left)" python3 -m warpforge.cli calibrate level1 --device cuda --rep-ms 25 \
  --out "$OUT/aa_rep25_level1.jsonl" > "$OUT/aa_rep25_level1.log" 2>&1
tail -4 "$OUT/aa_rep25_level1.log"
step "A/A levels 2-3 at rep_ms=25 ($(left) s left)"
[ "$(left)" -gt 30 ] && timeout "$(left)" python3 -m warpforge.cli calibrate level2 level3 --device cuda --rep-ms 25 \
  --out "$OUT/aa_rep25_level23.jsonl" > "$OUT/aa_rep25_level23.log" 2>&1
tail -4 "$OUT/aa_rep25_level23.log" 2>/dev/null
