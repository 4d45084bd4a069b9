#!/usr/bin/env bash
# What was built without a GPU in session 7 (2026-11-23), checked in one device call (about 8
# minutes on an H100). Usage: bash lab/gpu_checks.sh OUT_DIR
# 1. the GPU tests of the GEMM choices (cuBLASLt reconfigurations among them) and of the evaluator;
# 2. the throughput benchmark's stage times on 8 candidates: the zip-checksum fix
#    (compare with benchmarks/results/throughput_h100_2026-11-23/stages/);
# 3. the masked_scaled_softmax campaign kernel, which ran an H100 out of memory before the
#    input sets were capped by their bytes;
# 4. `gemm tune` and `gemm bench` on long-K shapes, where split-K reconfigurations of cuBLASLt's
#    algorithms can matter (benchmarks/gemm_longk_sample.csv).
# nvmath-python comes from wheels in .whl/ when present (an offline machine).
set -uo pipefail
OUT=${1:?usage: gpu_checks.sh OUT_DIR}
cd "$(dirname "$0")/.."
if ls .whl/nvmath*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/nvmath*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
step() { echo; echo "== $(date -u +%H:%M:%S) $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
step "GPU tests"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_gemm_gpu.py tests/test_gpu.py 2>&1 | tail -25 | tee "$OUT/pytest_gpu.log"
step "throughput stages (8 candidates)"
timeout 150 python3 benchmarks/throughput.py --out "$OUT/stages" --skip-serial --families triton,pytorch --limit 4 \
  > "$OUT/stages.log" 2>&1
rm -rf "$OUT/stages/corpus"
python3 benchmarks/throughput.py --out "$OUT/x" --summarise "$OUT/stages" | python3 -c \
  'import json,sys; print(json.dumps(json.load(sys.stdin)["stages"], indent=1))' | tee "$OUT/stages_summary.json"
step "masked_scaled_softmax with the input sets capped"
bash benchmarks/campaign/run.sh "$OUT/campaign" level2_masked_scaled_softmax
step "gemm tune + bench on long-K shapes"
timeout 200 python3 -m warpforge.cli gemm tune --shapes benchmarks/gemm_longk_sample.csv --layout nn --out "$OUT/tune" 2>&1 | tail -4
timeout 120 python3 -m warpforge.cli gemm bench --shapes benchmarks/gemm_longk_sample.csv --layout nn \
  --table "$OUT/tune/table.json" --out "$OUT" 2>&1 | tail -4
# a device call returns at most 8 files, 2 folders down: everything else travels in one archive
tar czf "$OUT/all.tgz" -C "$OUT" --exclude all.tgz --exclude x . && rm -rf "$OUT/stages" "$OUT/tune" "$OUT/campaign" "$OUT/x"
