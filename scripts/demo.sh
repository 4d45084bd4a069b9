#!/usr/bin/env bash
# Set up warpforge and run its main job:
#  1. evaluate and benchmark the bundled example kernels against their reference programs
#     (on the GPU when one is visible, else on the CPU);
#  2. run the LLM optimisation loop on three suite tasks into a fresh archive, then write its
#     HTML report: with the LLM named in WARPFORGE_LLM (e.g. openai:gpt-4o, with its key set;
#     WARPFORGE_BASE_URL for a local vLLM / Ollama server) when there is one, else with the
#     recorded replies in examples/replay (no key, no network).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
source scripts/_install.sh
install_warpforge "$PY" triton
"$PY" -m warpforge.cli demo "$@"

# optimize exits 1 when no task improved on eager PyTorch: a result, reported like any other;
# 2 (usage, configuration) and anything else still stop the demo with that code
optimize() {
  local rc=0
  "$PY" -m warpforge.cli optimize "$@" || rc=$?
  if [ "$rc" -eq 1 ]; then
    echo "warpforge demo: no task improved on eager PyTorch this time; writing the report anyway" >&2
  elif [ "$rc" -ne 0 ]; then
    exit "$rc"
  fi
}

OUT=warpforge-demo
rm -rf "$OUT" && mkdir -p "$OUT"
TASKS=(level1/diag_matmul level2/gemm_rowsum level2/rank1_matmul)
if [ -n "${WARPFORGE_LLM:-}" ]; then
  echo "warpforge demo: optimising ${TASKS[*]} with $WARPFORGE_LLM" >&2
  optimize "${TASKS[@]}" --llm "$WARPFORGE_LLM" ${WARPFORGE_BASE_URL:+--base-url "$WARPFORGE_BASE_URL"} \
    --archive "$OUT/archive.db" --max-candidates 8
else
  echo "warpforge demo: no WARPFORGE_LLM set, so the loop runs on recorded replies (examples/replay/cpu_suite.jsonl)" >&2
  optimize "${TASKS[@]}" --llm replay:examples/replay/cpu_suite.jsonl \
    --archive "$OUT/archive.db" --max-candidates 4 --generation-size 2
fi
"$PY" -m warpforge.cli report "$OUT/archive.db" --out "$OUT/report"
echo "warpforge demo: archive $OUT/archive.db, report $OUT/report/index.html" >&2
