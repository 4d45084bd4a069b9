#!/usr/bin/env bash
# The agent campaign: every kernel in examples/campaign/ (written by coding agents
# through the agent CLI) evaluated on the GPU with `warpforge agent eval`, recorded in one
# archive with the agent as proposer. Usage:
#   bash benchmarks/campaign/run.sh OUT_DIR [KERNEL_NAME...]   (default: all, e.g. level2_gemm_rowsum)
# Writes OUT_DIR/campaign.db, OUT_DIR/evals/<kernel>.json; summarise with table.py.
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0;; esac  # the comment above
set -uo pipefail
OUT=${1:?usage: run.sh OUT_DIR [KERNEL_NAME...]}
shift
if [ $# -eq 0 ]; then set -- $(ls examples/campaign/*.py | xargs -n1 basename | sed 's/\.py$//'); fi
mkdir -p "$OUT/evals"
export PYTHONUNBUFFERED=1
for name in "$@"; do
  f=examples/campaign/$name.py
  task="${name%%_*}/${name#*_}"
  python - "$f" >"$OUT/evals/$name.analysis.txt" <<'PY'
import ast, sys
print(ast.get_docstring(ast.parse(open(sys.argv[1]).read())) or "")
PY
  start=$(date +%s)
  timeout -s KILL 240 python -m warpforge.cli agent eval "$task" "$f" --device cuda --archive "$OUT/campaign.db" \
      --agent-name "${WARPFORGE_AGENT:-claude-code}" --analysis-file "$OUT/evals/$name.analysis.txt" >"$OUT/evals/$name.json" \
      2>"$OUT/evals/$name.err"
  rc=$?
  python - "$OUT/evals/$name.json" "$rc" "$(( $(date +%s) - start ))" "$task" <<'PY'
import json, sys
path, rc, secs, task = sys.argv[1:]
try:
    d = json.load(open(path))
    print(f"{task:30s} rc={rc} {secs:>4s}s {d['status']:9s} x{d.get('speedup')} vs-compile x{d.get('speedup_vs_compile')} "
          f"{(d.get('kernels') or {}).get('kind')} roof={(d.get('roofline') or {}).get('fraction')} | {d['reason'][:120]}")
except Exception as exc:
    print(f"{task:30s} rc={rc} {secs}s NO JSON ({exc})")
PY
done
