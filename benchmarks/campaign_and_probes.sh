#!/usr/bin/env bash
# One device call on a 4-GPU machine that serves two issues at once: GPUs 0-2 evaluate the
# campaign's pending outbox jobs (issue 22, benchmarks/outbox_gpu.sh), GPU 3 runs issue 21's
# measurements one after the other (the A/A at a 25 ms budget, then the memory footprint of the
# largest suite tasks). Each side stops at the deadline; results are packed as they arrive.
# Keep SECONDS below the call's own limit (the device time left, less about 40 s of start-up).
# Usage: bash benchmarks/campaign_and_probes.sh OUT_DIR OUTBOX [SECONDS]
set -uo pipefail
OUT=${1:?usage: campaign_and_probes.sh OUT_DIR OUTBOX [SECONDS]}
BOX=${2:?OUTBOX}
T=${3:-480}
HERE=$(cd "$(dirname "$0")" && pwd)
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac
mkdir -p "$OUT"
CUDA_VISIBLE_DEVICES=0,1,2 COMPILE_WORKERS=${COMPILE_WORKERS:-12} bash "$HERE/outbox_gpu.sh" "$OUT/campaign" "$BOX" "$T" \
  > "$OUT/campaign.log" 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=3
  end=$(( $(date +%s) + T ))
  BUDGETS=25 bash "$HERE/timing_budget.sh" "$OUT/budget" $(( T * 2 / 3 ))
  left=$(( end - $(date +%s) ))
  [ "$left" -gt 60 ] && timeout "$left" bash "$HERE/memory_peak.sh" "$OUT/memory"
) > "$OUT/probes.log" 2>&1
wait
tail -3 "$OUT/campaign.log"; tail -12 "$OUT/probes.log"
