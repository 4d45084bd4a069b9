#!/usr/bin/env bash
# A/A on a GPU: A/A over the built-in suite and KernelBench levels 1-3, and CUDA-L1's released
# H100 kernels through the evaluator. Resumable: run it again (with the same RESULTS_DIR holding
# what earlier runs fetched) and it goes on where it stopped.
#   python benchmarks/kernelbench_prep.py --kernelbench KernelBench/KernelBench \
#       --cudal1 CUDA-L1/optimized_cuda_code/h100.json --out .kb      # once, needs the two checkouts
#   bash benchmarks/kernelbench_gpu.sh OUT_DIR [SECONDS] [RESULTS_DIR]
# One stream per GPU, each on its own GPU (CUDA_VISIBLE_DEVICES):
#   suite:  `warpforge calibrate` over the built-in suite (level 1 on GPU 0, levels 2-3 on GPU 1,
#           one after the other on a one-GPU machine);
#   kb:     KernelBench's tasks still to do, in the order of .kb/aa_order.txt (the stratified sample
#           comes first), dealt round-robin to the GPUs; GPU i writes aa_kernelbench_<KB_TAG>_g<i>.jsonl
#           (KB_TAG, default "d", sorts after the files of earlier runs: the latest row of a task wins);
#   cudal1: `warpforge eval-batch` over CUDA-L1's kernels still to do (.kb/cudal1_order.txt), dealt
#           the same way, into cudal1_<KB_TAG>_g<i>.jsonl.
# A task is still to do unless its latest row in OUT (which starts as a copy of RESULTS_DIR) is
# other than a harness error: a run the harness itself failed (out of memory, a reference process
# killed) is tried again. KB_SKIP: an extended regex of task paths to leave out.
# Each step stops at the deadline (SECONDS, default 540); KernelBench gets KB_SHARE percent of the
# time (default 50) when CUDA-L1 follows it. Rows are appended as they arrive, so a step cut short
# loses only its task in flight. Then: python benchmarks/kernelbench_summary.py DIR.
# On GPU 0, before its KernelBench share: GPU_TESTS=1 runs tests/test_gpu.py, EXPLOITS=1
# benchmarks/eval_gpu.py (the GPU exploits and honest candidates). STEPS picks the steps (default "suite kb cudal1").
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0;; esac  # the comment above
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
NGPU=$(nvidia-smi -L | wc -l)
KB_TAG=${KB_TAG:-d}
python3 benchmarks/kernelbench_summary.py "$OUT" --settled > /tmp/kb_settled.txt || exit 2
grep -vE "${KB_SKIP:-^$}" .kb/aa_order.txt | while read -r path; do
  grep -qxF "kb $(basename "$(dirname "$path")")/$(basename "$path" .py)" /tmp/kb_settled.txt || echo "$path"
done > /tmp/kb_order.txt
while read -r pair; do
  grep -qxF "cudal1 $(basename "${pair##*:}")" /tmp/kb_settled.txt || echo "$(realpath "${pair%:*}"):$(realpath "${pair##*:}")"
done < .kb/cudal1_order.txt > /tmp/cudal1_order.txt
echo "$NGPU GPU(s); to do: $(wc -l < /tmp/kb_order.txt) KernelBench tasks, $(wc -l < /tmp/cudal1_order.txt) CUDA-L1 kernels"
for ((i = 0; i < NGPU; i++)); do
  awk -v n="$NGPU" -v i="$i" 'NR % n == i' /tmp/kb_order.txt > "/tmp/kb_gpu$i.txt"
  awk -v n="$NGPU" -v i="$i" 'NR % n == i' /tmp/cudal1_order.txt > "/tmp/cudal1_gpu$i.txt"
done

aa() {  # GPU OUTFILE TASK... : A/A until the deadline (DEADLINE, else END)
  local gpu=$1 out=$2 t; shift 2
  [ $# -gt 0 ] || return 0
  t=$(( ${DEADLINE:-$END} - $(date +%s) )); [ "$t" -gt 30 ] || return 0
  step "GPU $gpu: calibrate $# -> $(basename "$out") ($t s left)"
  CUDA_VISIBLE_DEVICES=$gpu timeout "$t" python3 -m warpforge.cli calibrate "$@" --device cuda --out "$out" \
    2>&1 | tee -a "$OUT/calibrate_gpu$gpu.log" | tail -4
}

cudal1() {  # GPU: this GPU's share of the CUDA-L1 kernels, until the deadline
  local gpu=$1 t
  t=$(left); [ "$t" -gt 60 ] || return 0
  [ -s "/tmp/cudal1_gpu$gpu.txt" ] || return 0
  step "GPU $gpu: CUDA-L1, $(wc -l < "/tmp/cudal1_gpu$gpu.txt") kernels ($t s left)"
  CUDA_VISIBLE_DEVICES=$gpu timeout "$t" python3 -m warpforge.cli eval-batch --manifest "/tmp/cudal1_gpu$gpu.txt" \
    --device cuda --compile-workers 4 --json >> "$OUT/cudal1_${KB_TAG}_g$gpu.jsonl" 2>> "$OUT/cudal1_g$gpu.log"
  tail -3 "$OUT/cudal1_g$gpu.log"
}

STEPS=${STEPS:-suite kb cudal1}
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
stream() {  # GPU: its steps, one after the other
  local g=$1 t deadline
  if has suite; then
    [ "$g" = 0 ] && aa 0 "$OUT/aa_suite.jsonl" level1
    { [ "$g" = 1 ] || [ "$NGPU" = 1 ]; } && aa "$g" "$OUT/aa_suite_b.jsonl" level2 level3
  fi
  if [ "$g" = 0 ] && [ -n "${GPU_TESTS:-}" ]; then
    step "GPU 0: GPU tests"
    CUDA_VISIBLE_DEVICES=0 timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -15 | tee -a "$OUT/gpu_tests.log"
  fi
  if [ "$g" = 0 ] && [ -n "${EXPLOITS:-}" ]; then
    t=$(left); step "GPU 0: exploits and candidates ($t s left)"
    CUDA_VISIBLE_DEVICES=0 timeout "$t" python3 benchmarks/eval_gpu.py --out "$OUT" --time-budget $(( t / 3 )) \
      > "$OUT/eval_gpu.log" 2>&1
    tail -25 "$OUT/eval_gpu.log"
  fi
  if has kb; then
    deadline=$END
    if has cudal1 && [ -s "/tmp/cudal1_gpu$g.txt" ]; then
      deadline=$(( $(date +%s) + $(left) * ${KB_SHARE:-50} / 100 ))
    fi
    DEADLINE=$deadline aa "$g" "$OUT/aa_kernelbench_${KB_TAG}_g$g.jsonl" $(cat "/tmp/kb_gpu$g.txt")
  fi
  if has cudal1; then cudal1 "$g"; fi
}
for ((i = 0; i < NGPU; i++)); do
  stream "$i" > "$OUT/stream$i.log" 2>&1 &
done
wait
for ((i = 0; i < NGPU; i++)); do cat "$OUT/stream$i.log"; done
wc -l "$OUT"/*.jsonl
