#!/usr/bin/env bash
# The GEMM track on a GPU machine, in one go: GPU tests, tuning, benchmark, all written under OUT.
#   bash benchmarks/gemm_gpu.sh OUT SET SAMPLE [MODES] [COMPILE_N]
# e.g. bash benchmarks/gemm_gpu.sh /tmp/out cudal2 120 offline,server 8
# RECORDS="FILE.jsonl ..." continues from earlier tuning records (those shapes are not tuned again;
# where a shape is in several files, the last one's record wins), e.g. the H100 llm sample's records,
# restored from git history (benchmarks/results/README.md, "What is not kept"):
#   RECORDS="llm_tune_a.jsonl llm_tune_b.jsonl" bash benchmarks/gemm_gpu.sh OUT llm 160 offline,server 0
# nvmath-python (cuBLASLt baselines) is installed from wheels in .whl/ when present (an offline
# machine); otherwise it must be importable already (pip install 'warpforge[gemm]').
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0;; esac  # the comment above
set -uo pipefail
OUT=${1:?output folder}; SET=${2:-cudal2}; SAMPLE=${3:-20}; MODES=${4:-offline,server}; COMPILE=${5:-0}
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
mkdir -p "$OUT/tune"
# (a file of its own: the sweep reads every tune*.jsonl of the folder and appends only to tune.jsonl)
i=0
for f in ${RECORDS:-}; do  # tune.committed0.jsonl, 1, ...: read in this order, before tune.jsonl
  cp "$f" "$OUT/tune/tune.committed$i.jsonl" || exit 1; i=$((i + 1))
done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
python3 -m warpforge.cli gemm tune --shapes "$SET" --sample "$SAMPLE" --out "$OUT/tune" 2>&1 | tail -5
python3 -m warpforge.cli gemm bench --shapes "$SET" --sample "$SAMPLE" --table "$OUT/tune/table.json" \
  --modes "$MODES" --compile "$COMPILE" --out "$OUT" 2>&1 | tail -5
