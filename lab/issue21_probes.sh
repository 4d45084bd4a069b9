#!/usr/bin/env bash
# Issue 21's remaining measurements on one GPU, each packed into OUT/all.tgz as soon as it is done
# (a device call brings back at most 8 files; the work folder is outside OUT):
#   oneshot  the wall time of a one-shot `warpforge eval` of a small task, 3 times (the first
#            with cold Triton and baseline caches)
#   memory   lab/memory_peak.sh on the largest suite tasks, at the default input-set
#            budget and at SETS_GB (by process: reference, candidate, parent)
#   corpus   lab/throughput_sample.sh: the corpus mix against the serial evaluator
# Usage: bash lab/issue21_probes.sh OUT_DIR "oneshot memory corpus" [SAMPLE] [SERIAL_SAMPLE]
set -uo pipefail
OUT=${1:?usage: issue21_probes.sh OUT_DIR PARTS [SAMPLE] [SERIAL_SAMPLE]}
PARTS=${2:-oneshot memory corpus}
HERE=$(cd "$(dirname "$0")" && pwd)
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac
source "$HERE/../benchmarks/_gpu_env.sh"
W=$(mktemp -d /tmp/issue21.XXXXXX)
mkdir -p "$OUT"
pack() { tar czf "$OUT/.all.tgz.tmp" -C "$W" . && mv "$OUT/.all.tgz.tmp" "$OUT/all.tgz"; }
gpu_facts | tee "$W/gpu.txt"
for part in $PARTS; do
  case $part in
    oneshot)
      step "one-shot warpforge eval, 3 times"
      for i in 1 2 3; do
        s=$(date +%s.%N)
        python3 -m warpforge.cli eval level1/softmax examples/softmax_triton.py --device cuda --json > "$W/oneshot_$i.json" 2> "$W/oneshot_$i.log"
        rc=$?
        e=$(date +%s.%N)
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps({'run': int(sys.argv[2]), 'rc': int(sys.argv[3]), 'wall_s': round(float(sys.argv[5]) - float(sys.argv[4]), 2), 'status': r.get('status'), 'speedup': r.get('speedup')}))" \
          "$W/oneshot_$i.json" "$i" "$rc" "$s" "$e" | tee -a "$W/oneshot.jsonl"
      done ;;
    memory)
      step "memory footprint"
      SETS_GB=${SETS_GB:-default 12} bash "$HERE/memory_peak.sh" "$W/memory" ;;
    corpus)
      step "corpus mix"
      bash "$HERE/throughput_sample.sh" "$W/corpus" "${3:-36}" "${4:-12}"
      rm -f "$W/corpus/all.tgz" ;;
  esac
  pack
done
ls -R "$OUT"
