#!/usr/bin/env bash
# Issue 21: what a smaller timing budget buys and costs on a GPU. Two streams, each on its own GPU:
#   turnaround  (GPU $G1): one Judge's seconds per candidate on level1/relu at --rep-ms 100 (the
#               default), 25 and 10 (benchmarks/judge_turnaround.py, 7 evaluations each), then the
#               A/A of the suite's levels 2-3 at --rep-ms 25;
#   aa          (GPU $G2): the A/A of the suite's level 1 at --rep-ms 25 (warpforge calibrate).
# The A/A at the default budget, same GPU kind, is benchmarks/results/kernelbench_h100_2026-11-25/aa_suite*.jsonl.
# Usage: G1=2 G2=3 bash benchmarks/timing_budget.sh OUT_DIR [SECONDS]
set -uo pipefail
OUT=${1:?usage: timing_budget.sh OUT_DIR [SECONDS]}
T=${2:-540}
source "$(dirname "$0")/_gpu_env.sh"
mkdir -p "$OUT"
END=$(( $(date +%s) + T ))
left() { echo $(( END - $(date +%s) )); }
turnaround() {
  for ms in 100 25 10; do
    CUDA_VISIBLE_DEVICES=${G1:-0} timeout "$(left)" python3 benchmarks/judge_turnaround.py --out "$OUT" --device cuda \
      --label "rep_ms=$ms" --rep-ms "$ms" --n 7 2>&1 | tail -1
  done
  CUDA_VISIBLE_DEVICES=${G1:-0} timeout "$(left)" python3 -m warpforge.cli calibrate level2 level3 --device cuda \
    --rep-ms 25 --out "$OUT/aa_rep25_level23.jsonl" > "$OUT/aa_rep25_level23.log" 2>&1
}
aa() {
  CUDA_VISIBLE_DEVICES=${G2:-1} timeout "$(left)" python3 -m warpforge.cli calibrate level1 --device cuda \
    --rep-ms 25 --out "$OUT/aa_rep25_level1.jsonl" > "$OUT/aa_rep25_level1.log" 2>&1
}
step "timing budget: turnaround on GPU ${G1:-0}, A/A on GPU ${G2:-1}"
turnaround > "$OUT/turnaround.log" 2>&1 &
aa &
wait
cat "$OUT/turnaround.log"; tail -4 "$OUT"/aa_rep25_*.log
