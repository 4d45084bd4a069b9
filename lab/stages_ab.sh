#!/usr/bin/env bash
# Issue 21: where a GPU evaluation's seconds go, this checkout against an older one, in one device
# call on the same GPU (about 9 minutes on an H100). OLD_SRC is the older checkout's src/ folder
# (made with `mkdir -p old && git archive COMMIT src | tar -x -C old`).
# Usage: bash lab/stages_ab.sh OUT_DIR OLD_SRC|- [EVAL_RESUME_JSON] [EVAL_BUDGET_S]
# ("-": this checkout only). The data-path GPU tests run first; if they fail, nothing else runs.
set -uo pipefail
OUT=${1:?usage: stages_ab.sh OUT_DIR OLD_SRC [EVAL_RESUME_JSON] [EVAL_BUDGET_S]}
OLD=${2:?OLD_SRC}
[ "$OLD" = - ] || OLD=$(realpath "$OLD")
RESUME=${3:-}
BUDGET=${4:-150}
source "$(dirname "$0")/../benchmarks/_gpu_env.sh"
NEW_PYTHONPATH=$PYTHONPATH
mkdir -p "$OUT"
gpu_facts | tee "$OUT/gpu.txt"
step "GPU tests"
timeout 120 python3 -m pytest -x -q -p no:cacheprovider tests/test_gpu.py -k "shared or cuda_ipc" 2>&1 | tail -30 \
  | tee "$OUT/pytest_gpu_data_path.log"
grep -q " passed" "$OUT/pytest_gpu_data_path.log" && ! grep -q "failed" "$OUT/pytest_gpu_data_path.log" || exit 1
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -25 | tee "$OUT/pytest_gpu.log"
ARMS="new"; [ "$OLD" = - ] || ARMS="new old"
for arm in $ARMS; do
  step "throughput stages, $arm (8 candidates)"
  if [ "$arm" = old ]; then export PYTHONPATH=$OLD:${NEW_PYTHONPATH#$PWD/src:}; else export PYTHONPATH=$NEW_PYTHONPATH; fi
  python3 -c "import warpforge; print(warpforge.__file__)"
  throughput_stages "$OUT" "stages_$arm"
done
export PYTHONPATH=$NEW_PYTHONPATH
step "GPU candidates and exploits"
timeout $((BUDGET + 60)) python3 benchmarks/eval_gpu.py --out "$OUT/eval" --time-budget "$BUDGET" \
  ${RESUME:+--resume "$RESUME"} > "$OUT/eval_gpu.log" 2>&1
tail -40 "$OUT/eval_gpu.log"
step "done"
tar czf /tmp/all.tgz -C "$OUT" --exclude x . && mv /tmp/all.tgz "$OUT/all.tgz" && rm -rf "$OUT/stages_new" "$OUT/stages_old" "$OUT/x" "$OUT/eval"
