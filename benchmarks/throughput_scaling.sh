#!/usr/bin/env bash
# 1 -> N GPU scaling on one host: the same sample of the throughput corpus evaluated by
# warpforge's local executor with one GPU worker, then with one worker per GPU. Each phase fits a
# device call (10 minutes); run them one after the other on the same machine, then compute the
# ratio with --scaling. Usage:
#   bash benchmarks/throughput_scaling.sh OUT 1 [SAMPLE]     # one GPU worker  -> OUT/w1
#   bash benchmarks/throughput_scaling.sh OUT all [SAMPLE]   # every GPU       -> OUT/wall
#   python benchmarks/throughput.py --out OUT --scaling OUT/w1/throughput_*.json OUT/wall/throughput_*.json
# Log lines are stamped with the epoch second (what --summarise reads). A phase stopped by a time
# limit continues with RESUME=1 (only the candidates its pool_results.jsonl lacks). Across device
# calls (each starts with an empty OUT), keep the phases in a carried folder: STATE=.scaling puts
# them there and packs the phase into OUT/<phase>.tgz every 30 s and at the end; back here,
# `tar xzf OUT/<phase>.tgz -C .scaling`, and the next call (carry .scaling) resumes with RESUME=1.
# TIME_S=N stops the phase after N seconds and still packs it (a call's limit is 600 s).
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0;; esac  # the comment above
set -uo pipefail
OUT=${1:?usage: throughput_scaling.sh OUT 1|all [SAMPLE]}
PHASE=${2:?usage: throughput_scaling.sh OUT 1|all [SAMPLE]}
SAMPLE=${3:-36}
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac
source "$(dirname "$0")/_gpu_env.sh"  # this checkout's warpforge, and a bubblewrap for the sandbox
# the machines with several GPUs ask for NVLink multicast to stay off (device KINDS.md)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
base=${STATE:-$OUT}
case $PHASE in
  1) dir=$base/w1; workers=(--workers 1) ;;
  all) dir=$base/wall; workers=() ;;
  *) echo "phase must be 1 or all, not $PHASE" >&2; exit 2 ;;
esac
mkdir -p "$dir" "$OUT"
pack() { [ -n "${STATE:-}" ] && tar czf "$OUT/.p.tgz" -C "$base" --exclude corpus "$(basename "$dir")" && mv "$OUT/.p.tgz" "$OUT/$(basename "$dir").tgz"; }
( while sleep 30; do pack; done ) &
PACKER=$!
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee "$dir/gpus.txt"
timeout "${TIME_S:-1d}" python3 benchmarks/throughput.py --out "$dir" --skip-serial --sample "$SAMPLE" "${workers[@]}" ${RESUME:+--resume} 2>&1 |
  while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N | cut -c1-14)" "$line"; done | tee -a "$dir/pool.log" |
  grep -E 'pool [0-9]+/|saved|Error' | tail -n 3
kill "$PACKER" 2>/dev/null
rm -rf "$dir/corpus"
pack || true
