#!/usr/bin/env bash
# The OS sandbox on a GPU (issue 18), in one device call (about 8 minutes on an H100):
# 1. the GPU tests and the sandbox attack tests, sandboxed;
# 2. every GPU candidate (honest CUDA / NVRTC / Triton / CuPy on torch's stream / torch.compile)
#    and every GPU exploit and fault fixture (illegal address, device hang) through the evaluator;
# 3. what the sandbox adds per candidate (benchmarks/sandbox_cost.py --device cuda).
# Usage: bash lab/sandbox_gpu.sh OUT_DIR [checks|cost|all]  (two device calls: checks, then cost)
set -uo pipefail
OUT=${1:?usage: sandbox_gpu.sh OUT_DIR [checks|cost|all]}
PART=${2:-all}
source "$(dirname "$0")/../benchmarks/_gpu_env.sh"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
"${WARPFORGE_BWRAP:-bwrap}" --version | tee -a "$OUT/gpu.txt"
python3 -c "from warpforge.evaluate import jail; print('sandbox problem:', jail.problem())" | tee -a "$OUT/gpu.txt"
if [ "$PART" != cost ]; then
step "GPU tests and sandbox attacks"
timeout 220 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_sandbox_attacks.py 2>&1 | tail -25 \
  | tee "$OUT/pytest.log"
step "GPU candidates, exploits and faults"
timeout 330 python3 benchmarks/eval_gpu.py --out "$OUT" --time-budget 300 2>&1 | tail -45 | tee "$OUT/eval_gpu.log"
fi
if [ "$PART" != checks ]; then
step "sandbox cost"
timeout 400 python3 benchmarks/sandbox_cost.py --out "$OUT" --device cuda --size cpu --n 12 --starts 30 2>&1 | tail -8 \
  | tee "$OUT/sandbox_cost.log"
fi
