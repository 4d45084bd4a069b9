#!/usr/bin/env bash
# Issue 19 on a GPU: A/A over the built-in suite and KernelBench levels 1-3, and CUDA-L1's released
# H100 kernels through the evaluator. Resumable: run it again (with the same RESULTS_DIR holding
# what earlier runs fetched) and it goes on where it stopped.
#   python benchmarks/kernelbench_prep.py --kernelbench KernelBench/KernelBench \
#       --cudal1 CUDA-L1/optimized_cuda_code/h100.json --out .kb      # once, needs the two checkouts
#   bash benchmarks/kernelbench_gpu.sh OUT_DIR [SECONDS] [RESULTS_DIR]
# Two streams, one per GPU (one after the other on a one-GPU machine):
#   GPU 0: `warpforge calibrate` over the suite's level 1, then KernelBench's tasks at odd
#          positions of .kb/aa_order.txt (the stratified sample comes first);
#   GPU 1: the suite's levels 2-3, KernelBench's even positions, then `warpforge eval-batch` over
#          CUDA-L1's kernels (.kb/cudal1_order.txt).
# Each step stops at the deadline (SECONDS, default 540); rows are appended as they arrive, so a
# step cut short loses only its task in flight. Then: python benchmarks/kernelbench_summary.py DIR.
# GPU_TESTS=1 runs tests/test_gpu.py first. STEPS picks the steps (default "suite kb cudal1"): on
# one GPU each step after the suite gets a share of the time left (KernelBench's two halves a
# quarter each, then CUDA-L1 the rest).
set -uo pipefail
OUT=${1:?usage: kernelbench_gpu.sh OUT_DIR [SECONDS] [RESULTS_DIR]}
BUDGET=${2:-540}
RES=${3:-}
START_DIR=$PWD
source "$(dirname "$0")/_gpu_env.sh"
case "$OUT" in /*) ;; *) OUT=$START_DIR/$OUT ;; esac
[ -f .kb/aa_order.txt ] || { echo "no .kb/aa_order.txt: run benchmarks/kernelbench_prep.py first"; exit 2; }
mkdir -p "$OUT"
[ -n "$RES" ] && [ -d "$RES" ] && cp "$RES"/*.jsonl "$OUT"/ 2>/dev/null
END=$(( $(date +%s) + BUDGET ))
left() { echo $(( END - $(date +%s) )); }
gpu_facts > "$OUT/machine_$(date -u +%Y%m%dT%H%M%S).txt" 2>&1
if [ -n "${GPU_TESTS:-}" ]; then  # GPU_TESTS=1: the GPU tests first (about a minute), into gpu_tests.log
  step "GPU tests"
  timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -15 | tee -a "$OUT/gpu_tests.log"
fi
NGPU=$(nvidia-smi -L | wc -l)
# KB_SKIP: an extended regex of task paths to leave out of this run (e.g. the 6 GiB-per-tensor
# elementwise tasks, which do not fit paired timing on an 80 GB GPU: docs/evaluation.md)
# ... and the tasks any earlier KernelBench file of OUT holds already, whichever half ran them
grep -vE "${KB_SKIP:-^$}" .kb/aa_order.txt | python3 -c '
import json, sys
from pathlib import Path
done = set()
for f in Path(sys.argv[1]).glob("aa_kernelbench*.jsonl"):
    for line in f.read_text().splitlines():
        try:
            done.add(json.loads(line)["task"])
        except (ValueError, KeyError):
            pass
for path in sys.stdin.read().split():
    if f"{Path(path).parent.name}/{Path(path).stem}" not in done:
        print(path)
' "$OUT" > /tmp/kb_order.txt
awk 'NR % 2 == 1' /tmp/kb_order.txt > /tmp/kb_gpu0.txt
awk 'NR % 2 == 0' /tmp/kb_order.txt > /tmp/kb_gpu1.txt

aa() {  # GPU OUTFILE TASK... : A/A until the deadline; skips the tasks OUTFILE already holds
  local gpu=$1 out=$2 t; shift 2
  t=$(left); [ "$t" -gt 30 ] || return 0
  step "GPU $gpu: calibrate -> $(basename "$out") ($t s left)"
  CUDA_VISIBLE_DEVICES=$gpu timeout "$t" python3 -m warpforge.cli calibrate "$@" --device cuda --out "$out" \
    2>&1 | tee -a "$OUT/calibrate_gpu$gpu.log" | tail -4
}

cudal1() {  # GPU: the CUDA-L1 pairs not yet in cudal1.jsonl, until the deadline
  local gpu=$1 t
  t=$(left); [ "$t" -gt 60 ] || return 0
  python3 - "$OUT/cudal1.jsonl" > /tmp/cudal1_todo.txt <<'EOF'
import json, sys
from pathlib import Path
done = set()
if Path(sys.argv[1]).is_file():
    for line in Path(sys.argv[1]).read_text().splitlines():
        try:
            done.add(Path(json.loads(line)["candidate"]).name)
        except (ValueError, KeyError):
            pass
for pair in Path(".kb/cudal1_order.txt").read_text().split():
    task, cand = pair.rsplit(":", 1)
    if Path(cand).name not in done:
        print(f"{Path(task).resolve()}:{Path(cand).resolve()}")
EOF
  [ -s /tmp/cudal1_todo.txt ] || return 0
  step "GPU $gpu: CUDA-L1, $(wc -l < /tmp/cudal1_todo.txt) kernels to go ($t s left)"
  CUDA_VISIBLE_DEVICES=$gpu timeout "$t" python3 -m warpforge.cli eval-batch --manifest /tmp/cudal1_todo.txt \
    --device cuda --compile-workers 8 --json >> "$OUT/cudal1.jsonl" 2>> "$OUT/cudal1.log"
  tail -3 "$OUT/cudal1.log"
}

STEPS=${STEPS:-suite kb cudal1}
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
stream0() {
  has suite && aa 0 "$OUT/aa_suite.jsonl" level1
  has kb && aa 0 "$OUT/aa_kernelbench.jsonl" $(cat /tmp/kb_gpu0.txt)
}
stream1() {
  local g=$(( NGPU > 1 ? 1 : 0 ))
  has suite && aa $g "$OUT/aa_suite_b.jsonl" level2 level3
  has kb && aa $g "$OUT/aa_kernelbench_b.jsonl" $(cat /tmp/kb_gpu1.txt)
  has cudal1 && cudal1 $g
}
one_gpu() {  # the suite, then a share of the time left for each step after it
  local final=$END
  has suite && { aa 0 "$OUT/aa_suite.jsonl" level1; aa 0 "$OUT/aa_suite_b.jsonl" level2 level3; }
  if has kb; then
    local share=$(( $(left) / 4 ))
    has cudal1 || share=$(( $(left) / 2 ))
    END=$(( $(date +%s) + share )); aa 0 "$OUT/aa_kernelbench.jsonl" $(cat /tmp/kb_gpu0.txt)
    END=$(( $(date +%s) + share )); aa 0 "$OUT/aa_kernelbench_b.jsonl" $(cat /tmp/kb_gpu1.txt)
    END=$final
  fi
  has cudal1 && cudal1 0
}
if [ "$NGPU" -gt 1 ]; then
  stream0 > "$OUT/stream0.log" 2>&1 &
  stream1 > "$OUT/stream1.log" 2>&1 &
  wait
  cat "$OUT/stream0.log" "$OUT/stream1.log"
else
  one_gpu
fi
wc -l "$OUT"/*.jsonl
