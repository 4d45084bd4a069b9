#!/usr/bin/env bash
# The GPU machine's side of an outbox campaign (docs/kernelbench.md, "The GPU on another
# machine"): evaluate every job in OUTBOX that has no result yet, one worker per GPU, until TIME_S,
# packing the results that have arrived into OUT/results.tgz every PACK_S seconds (default 30) and
# at the end. The results are collected outside OUT: a device call brings back a limited number of
# files, and one cut short by its time limit must still bring back what was evaluated (the
# 2026-11-26 call that left 40 loose result files in OUT lost them all).
# Keep TIME_S below the call's own limit (the device budget left, less start-up).
# Usage: [CUDA_VISIBLE_DEVICES=0,1] [COMPILE_WORKERS=N] bash benchmarks/outbox_gpu.sh OUT_DIR OUTBOX [TIME_S]
# Back on the loop's machine: tar xzf OUT_DIR/results.tgz -C OUTBOX/results
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0;; esac  # the comment above
set -uo pipefail
OUT=${1:?usage: outbox_gpu.sh OUT_DIR OUTBOX [TIME_S]}
BOX=${2:?OUTBOX}
T=${3:-540}
source "$(dirname "$0")/_gpu_env.sh"
RES=$(mktemp -d /tmp/outbox_results.XXXXXX)
mkdir -p "$OUT"
pack() { tar czf "$OUT/.results.tgz.tmp" -C "$RES" . && mv "$OUT/.results.tgz.tmp" "$OUT/results.tgz"; }
gpu_facts | tee "$OUT/gpu.txt"
step "eval-batch --jobs $BOX"
( while sleep "${PACK_S:-30}"; do pack; done ) &
PACKER=$!
# its output to a file, not a pipe: `timeout` stops eval-batch, but a worker finishes the job in
# hand first, and holding a pipe open it held this script (and the device call) until then
timeout "$T" python3 -m warpforge.cli eval-batch --jobs "$BOX" --results "$RES" --device cuda \
  ${COMPILE_WORKERS:+--compile-workers "$COMPILE_WORKERS"} > "$RES.log" 2>&1
tail -5 "$RES.log" | tee "$OUT/eval_batch.log"
kill "$PACKER" 2>/dev/null
pack
step "done: $(ls "$RES" | wc -l) results in $OUT/results.tgz"
