#!/usr/bin/env bash
# Issue 21's memory target: the reference + candidate footprint of the largest suite tasks on one
# GPU, within 40 % of an 80 GB GPU. For each of the TOP largest tasks by input-set bytes
# (benchmarks/largest_task.py), an A/A evaluation (warpforge calibrate: the task's program as its
# own candidate, verified and timed, paired rounds and all) while nvidia-smi samples the GPU's
# used memory every 50 ms; prints and saves the peak of each, less the idle baseline.
# Usage: [CUDA_VISIBLE_DEVICES=0] [TOP=3] bash benchmarks/memory_peak.sh OUT_DIR
set -uo pipefail
OUT=${1:?usage: memory_peak.sh OUT_DIR}
source "$(dirname "$0")/_gpu_env.sh"
mkdir -p "$OUT"
GPU=${CUDA_VISIBLE_DEVICES:-0}; GPU=${GPU%%,*}
idle=$(nvidia-smi -i "$GPU" --query-gpu=memory.used --format=csv,noheader,nounits)
total=$(nvidia-smi -i "$GPU" --query-gpu=memory.total --format=csv,noheader,nounits)
python3 benchmarks/largest_task.py --top "${TOP:-3}" > "$OUT/largest.txt"
while read -r task gib; do
  name=${task//\//_}
  nvidia-smi -i "$GPU" --query-gpu=memory.used --format=csv,noheader,nounits -lms 50 > "$OUT/$name.mem" &
  sampler=$!
  python3 -m warpforge.cli calibrate "$task" --device cuda --out "$OUT/$name.jsonl" > "$OUT/$name.log" 2>&1
  kill "$sampler"
  peak=$(sort -n "$OUT/$name.mem" | tail -1)
  python3 - "$task" "$gib" "$idle" "$peak" "$total" <<'PY' | tee -a "$OUT/memory_peak.jsonl"
import json, sys
task, gib, idle, peak, total = sys.argv[1], float(sys.argv[2]), *map(float, sys.argv[3:])
print(json.dumps({"task": task, "input_set_gib": gib, "idle_mib": idle, "peak_mib": peak, "total_mib": total,
                  "footprint_mib": peak - idle, "fraction_of_gpu": round((peak - idle) / total, 4),
                  "target_fraction": 0.40}))
PY
done < "$OUT/largest.txt"
