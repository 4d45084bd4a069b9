#!/usr/bin/env bash
# Issue 21's memory target: the reference + candidate footprint of the largest suite tasks on one
# GPU, within 40 % of an 80 GB GPU. For each of the TOP largest tasks by input-set bytes
# (lab/largest_task.py), and each of SETS_GB (input-set budgets: "default" is 30 % of the
# GPU, a number is --sets-memory-gb), an A/A evaluation (warpforge calibrate: the task's program as
# its own candidate, verified and timed, paired rounds and all) while nvidia-smi samples the GPU's
# used memory every 50 ms, in all and by process (lab/gpu_memory_sampler.py: reference,
# candidate, parent); prints and saves the peak of each, less the idle baseline.
# Usage: [CUDA_VISIBLE_DEVICES=0] [TOP=3] [SETS_GB="default 12"] bash lab/memory_peak.sh OUT_DIR
set -uo pipefail
OUT=${1:?usage: memory_peak.sh OUT_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../benchmarks/_gpu_env.sh"
mkdir -p "$OUT"
GPU=${CUDA_VISIBLE_DEVICES:-0}; GPU=${GPU%%,*}
idle=$(nvidia-smi -i "$GPU" --query-gpu=memory.used --format=csv,noheader,nounits)
total=$(nvidia-smi -i "$GPU" --query-gpu=memory.total --format=csv,noheader,nounits)
python3 "$HERE/largest_task.py" --top "${TOP:-3}" > "$OUT/largest.txt"
while read -r task gib; do
  for sets in ${SETS_GB:-default}; do
    name=${task//\//_}_sets-$sets
    flag=(); [ "$sets" != default ] && flag=(--sets-memory-gb "$sets")
    python3 "$HERE/gpu_memory_sampler.py" --gpu "$GPU" > "$OUT/$name.mem.json" &
    sampler=$!
    python3 -m warpforge.cli calibrate "$task" --device cuda "${flag[@]}" --out "$OUT/$name.jsonl" > "$OUT/$name.log" 2>&1
    kill "$sampler"; wait "$sampler"
    python3 - "$task" "$gib" "$sets" "$idle" "$total" "$OUT/$name.mem.json" "$OUT/$name.jsonl" <<'PY' | tee -a "$OUT/memory_peak.jsonl"
import json, sys
task, gib, sets, idle, total, mem, result = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), sys.argv[6], sys.argv[7]
m = json.load(open(mem))
try:
    r = json.loads(open(result).readline())
    verdict = {"status": r.get("status"), "speedup": r.get("speedup"), "reason": r.get("reason")}
except (OSError, ValueError):
    verdict = {"status": None}
peak = m["peak_used_mib"]
print(json.dumps({"task": task, "input_set_gib": gib, "sets_memory_gb": sets, "idle_mib": idle, "peak_mib": peak,
                  "total_mib": total, "footprint_mib": peak - idle, "fraction_of_gpu": round((peak - idle) / total, 4),
                  "target_fraction": 0.40, "peak_by_role_mib": m["peak_by_role_mib"], "samples": m["samples"], **verdict}))
PY
  done
done < "$OUT/largest.txt"
