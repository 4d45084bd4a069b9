#!/usr/bin/env bash
# The GPU machine's side of an outbox campaign (docs/kernelbench.md, "The GPU on another
# machine"): evaluate every job in OUTBOX that has no result yet, one worker per GPU, writing
# each result into OUT/results as it arrives, until TIME_S; then pack them for the trip back.
# Usage: [CUDA_VISIBLE_DEVICES=0,1] [COMPILE_WORKERS=N] bash benchmarks/outbox_gpu.sh OUT_DIR OUTBOX [TIME_S]
# Back on the loop's machine: tar xzf OUT_DIR/results.tgz -C OUTBOX/results
set -uo pipefail
OUT=${1:?usage: outbox_gpu.sh OUT_DIR OUTBOX [TIME_S]}
BOX=${2:?OUTBOX}
T=${3:-540}
source "$(dirname "$0")/_gpu_env.sh"
mkdir -p "$OUT/results"
gpu_facts | tee "$OUT/gpu.txt"
step "eval-batch --jobs $BOX"
timeout "$T" python3 -m warpforge.cli eval-batch --jobs "$BOX" --results "$OUT/results" --device cuda \
  ${COMPILE_WORKERS:+--compile-workers "$COMPILE_WORKERS"} 2>&1 \
  | tail -5 | tee "$OUT/eval_batch.log"
step "done: $(ls "$OUT/results" | wc -l) results"
tar czf "$OUT/results.tgz" -C "$OUT/results" . && rm -rf "$OUT/results"
