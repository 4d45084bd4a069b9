#!/usr/bin/env bash
# Quick check of the CUDA path: a few examples through `warpforge eval`, each under a hard
# limit, with stack dumps of every process after 45 s (to find a hang). Prints one line each.
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} WARPFORGE_TRACE_AFTER_S=45 WARPFORGE_DEBUG=1
export WARPFORGE_REFERENCE_TIMEOUT=${WARPFORGE_REFERENCE_TIMEOUT:-100}
OUT=${OUT:-/tmp}
i=0
while read -r task cand flags; do
  i=$((i+1))
  start=$(date +%s.%N)
  timeout -s KILL 150 python -m warpforge.cli eval "$task" "$cand" --json --timeout 100 $flags >"$OUT/smoke_$i.json" 2>"$OUT/smoke_$i.err"
  rc=$?
  end=$(date +%s.%N)
  python - "$OUT/smoke_$i.json" "$rc" "$(python -c "print($end - $start)")" "$task" "$cand" <<'PY'
import json, sys
path, rc, wall, task, cand = sys.argv[1:]
try:
    d = json.load(open(path))
    k = d.get("kernels", {})
    print(f"{task:20s} {cand.split('/')[-1]:28s} rc={rc} {float(wall):6.1f}s {d['status']:10s} speedup={d['speedup']} "
          f"cand={d['candidate_ms']} ref={d['reference_ms']} compile={d['compile_ms']} kind={k.get('kind')} "
          f"frac={k.get('custom_time_fraction')} roof={d['roofline'].get('fraction')} | {d['reason'][:150]}")
except Exception as exc:
    print(f"{task:20s} {cand.split('/')[-1]:28s} rc={rc} {float(wall):6.1f}s NO JSON ({exc})")
PY
done
