#!/usr/bin/env bash
# Issue 19's CPU targets: A/A over the suite and the replay demo, on an idle machine and with
# background load (LOAD busy Python processes, default 2x the cores), one after the other.
#   bash lab/cpu_load_aa.sh OUT_DIR [aa|replay|all]
# writes OUT_DIR/aa_cpu_{idle,loaded}.jsonl (warpforge calibrate rows), replay_{idle,loaded}.json
# (warpforge optimize --json summaries) and load.txt (the load average during each loaded part).
set -uo pipefail
OUT=${1:?usage: cpu_load_aa.sh OUT_DIR [aa|replay|all]}
PART=${2:-all}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
LOAD=${LOAD:-$(( 2 * $(nproc) ))}
pids=()
load_on() { for _ in $(seq "$LOAD"); do python3 -c "while True: pass" & pids+=($!); done; sleep 2; }
load_off() { kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; pids=(); }
trap load_off EXIT
aa() {  # idle|loaded
  rm -f "$OUT/aa_cpu_$1.jsonl"
  warpforge calibrate level1 level2 level3 --device cpu --out "$OUT/aa_cpu_$1.jsonl" 2>&1 | tail -6
}
replay() {  # idle|loaded
  local db; db=$(mktemp -d)/demo.db
  warpforge optimize level1/diag_matmul level2/gemm_rowsum level2/rank1_matmul --llm replay:examples/replay/cpu_suite.jsonl \
    --device cpu --archive "$db" --max-candidates 4 --generation-size 2 --no-live --json > "$OUT/replay_$1.json" 2> "$OUT/replay_$1.log"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], [(t['task'], t['improved'], round(t['speedup'] or 0, 2)) for t in d['tasks']])" \
    "$OUT/replay_$1.json" "$1" 2>/dev/null || tail -3 "$OUT/replay_$1.log"
}
for what in aa replay; do
  [ "$PART" = all ] || [ "$PART" = "$what" ] || continue
  echo "== $what, idle"; $what idle
  echo "== $what, with $LOAD busy processes"; load_on; $what loaded; echo "$what: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/load.txt"; load_off
done
