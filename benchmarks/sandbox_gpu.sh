#!/usr/bin/env bash
# The OS sandbox on a GPU (issue 18), in one device call (about 8 minutes on an H100):
# 1. the GPU tests and the sandbox attack tests, sandboxed;
# 2. every GPU candidate (honest CUDA / NVRTC / Triton / CuPy on torch's stream / torch.compile)
#    and every GPU exploit and fault fixture (illegal address, device hang) through the evaluator;
# 3. what the sandbox adds per candidate (benchmarks/sandbox_cost.py --device cuda).
# Usage: bash benchmarks/sandbox_gpu.sh OUT_DIR [checks|cost|all]  (two device calls: checks, then cost)
# An offline machine without bubblewrap uses the unpacked Debian package in .sandbox/ (made here
# with `apt-get download bubblewrap libcap2 libselinux1 libpcre2-8-0` and `dpkg -x` into .sandbox/root).
set -uo pipefail
OUT=${1:?usage: sandbox_gpu.sh OUT_DIR [checks|cost|all]}
PART=${2:-all}
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
step() { echo; echo "== $(date -u +%H:%M:%S) $*"; }
if ! command -v bwrap >/dev/null 2>&1 && [ -x .sandbox/root/usr/bin/bwrap ]; then
  if .sandbox/root/usr/bin/bwrap --version >/dev/null 2>&1; then
    export WARPFORGE_BWRAP=$PWD/.sandbox/root/usr/bin/bwrap
  else  # its libraries are missing here: a wrapper finds them in the unpacked packages
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$PWD/.sandbox/root/lib/x86_64-linux-gnu:$PWD/.sandbox/root/usr/lib/x86_64-linux-gnu" \
      "$PWD/.sandbox/root/usr/bin/bwrap" > /tmp/bwrap && chmod +x /tmp/bwrap && export WARPFORGE_BWRAP=/tmp/bwrap
  fi
fi
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
