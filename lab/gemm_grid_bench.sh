#!/usr/bin/env bash
# Issue 23's benches over the whole grid's table, on a machine of 4 GPUs (fewer: the jobs share
# them): the table from every record in .gemm_grid/{cudal2,llm}, then at once, one job per GPU,
# `gemm bench` (fresh operands, torch.matmul / cuBLASLt heuristic / autotuned cuBLASLt beside the
# dispatcher) on the 96 held-out shapes, on SAMPLE cudal2 shapes spread by FLOPs, on SAMPLE llm
# shapes (offline and server mode), and on the held-out shapes again with unmeasured shapes tuned
# on first use (`--online`),
# then the model-written kernels' jobs in .campaign/gemm23/outbox if it is there and time is left.
# All stop SECONDS after the table; a bench file is rewritten after every shape, so a stopped one
# keeps its rows. OUT gets at most 7 files (logs.txt, results.tgz, 5 bench/*.json; the table is not
# sent back: `gemm table` over the same records builds it): with gemm_grid.sh's records.tgz before
# it (remove its grid.log, printed anyway), a call's 8.
#   here:      tar czf .carry/cutlass_libs.tgz -C .cutlass_libs nn nt  (gemm_grid.sh unpacks it too)
#   the call:  bash lab/gemm_grid_bench.sh OUT 420 96
#              (carry .carry .whl .gemm_grid .sandbox [.campaign/gemm23/outbox]; .whl: nvmath-python)
#   back here: OUT/bench/*.json; tar xzf OUT/results.tgz -C .campaign/gemm23/outbox/results
set -uo pipefail
OUT=${1:?usage: gemm_grid_bench.sh OUT_DIR [SECONDS] [SAMPLE]}
T=${2:-420}
SAMPLE=${3:-96}
# the held-out shapes: since session 22 a second draw (seed 24), as the dispatcher's rule for unmeasured
# shapes was changed after reading the first (seed 23: HELDOUT=benchmarks/gemm_heldout_cudal2.csv)
HELDOUT=${HELDOUT:-benchmarks/gemm_heldout2_cudal2.csv}
HERE=$(cd "$(dirname "$0")" && pwd)
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac
source "$HERE/../benchmarks/_gpu_env.sh"
carried_wheels || exit 1
[ -f .carry/cutlass_libs.tgz ] && mkdir -p .cutlass_libs && tar xzf .carry/cutlass_libs.tgz -C .cutlass_libs
mkdir -p "$OUT/bench"
R=$(mktemp -d /tmp/gridrec.XXXXXX)
gpu_facts > "$R/gpu.txt"
for f in .gemm_grid/*/*.jsonl.gz; do gunzip -c "$f" > "$R/$(basename "$(dirname "$f")")_$(basename "$f" .gz)"; done
python3 -m warpforge.cli gemm table "$R"/*.jsonl --out "$R/table.json" || exit 1  # rebuilt here the same way
N=$(nvidia-smi -L | wc -l)
gpu() { echo $(( $1 % N )); }
DEADLINE=$(( $(date +%s) + T ))
left() { local s=$(( DEADLINE - $(date +%s) )); echo $(( s > 1 ? s : 1 )); }
bench() {  # GPU LAYOUT ARGS...: one bench until the deadline, its log to R
  local g=$1 lay=$2; shift 2
  CUDA_VISIBLE_DEVICES=$g WARPFORGE_CUTLASS_LIB_DIR=$PWD/.cutlass_libs/$lay timeout "$(left)" python3 -m warpforge.cli gemm bench \
    --table "$R/table.json" --out "$OUT/bench" "$@" >> "$R/bench_$g.log" 2>&1
}
bench "$(gpu 0)" nn --shapes "$HELDOUT" --modes offline &
bench "$(gpu 1)" nn --shapes cudal2 --sample "$SAMPLE" --modes offline &
bench "$(gpu 2)" nt --shapes llm --sample "$SAMPLE" --modes offline,server &  # server: an inference service's calls
{  # the held-out shapes again, tuned on first use (torch, cuBLASLt, the nearest shape's kernel); then the model kernels
  bench "$(gpu 3)" nn --shapes "$HELDOUT" --modes offline --online
  if [ -d .campaign/gemm23/outbox/jobs ] && [ "$(left)" -gt 60 ]; then
    CUDA_VISIBLE_DEVICES=$(gpu 3) bash "$HERE/../benchmarks/outbox_gpu.sh" "$R/outbox" .campaign/gemm23/outbox "$(left)" > "$R/outbox.log" 2>&1
  fi
} &
wait
{ cat "$R/gpu.txt"; tail -n 4 "$R"/*.log; } > "$OUT/logs.txt"
cat "$OUT/logs.txt"
[ -f "$R/outbox/results.tgz" ] && mv "$R/outbox/results.tgz" "$OUT/results.tgz"
ls -la "$OUT" "$OUT/bench"
