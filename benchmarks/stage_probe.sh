#!/usr/bin/env bash
# One device call (about 9 minutes on an H100) for issues 20 and 21: the GPU tests after the
# protocol/timer changes, where a GPU evaluation's seconds go now (with the parent's own parts,
# "compare" and "reference_rounds"), how data could cross between the processes faster
# (benchmarks/transfer_probe.py), and the GPU candidates and exploits (benchmarks/eval_gpu.py).
# Usage: bash benchmarks/stage_probe.sh OUT_DIR [EVAL_BUDGET_S]
set -uo pipefail
OUT=${1:?usage: stage_probe.sh OUT_DIR [EVAL_BUDGET_S]}
BUDGET=${2:-170}
source "$(dirname "$0")/_gpu_env.sh"
mkdir -p "$OUT"
gpu_facts | tee "$OUT/gpu.txt"
step "GPU tests"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -25 | tee "$OUT/pytest_gpu.log"
step "transfer probe"
timeout 120 python3 benchmarks/transfer_probe.py --out "$OUT" > "$OUT/transfer_probe.log" 2>&1
tail -5 "$OUT/transfer_probe.log"
step "throughput stages (8 candidates)"
throughput_stages "$OUT" stages
step "GPU candidates and exploits"
timeout $((BUDGET + 60)) python3 benchmarks/eval_gpu.py --out "$OUT/eval" --time-budget "$BUDGET" > "$OUT/eval_gpu.log" 2>&1
tail -40 "$OUT/eval_gpu.log"
step "done"
tar czf "$OUT/all.tgz" -C "$OUT" --exclude all.tgz --exclude x . && rm -rf "$OUT/stages" "$OUT/x" "$OUT/eval"
