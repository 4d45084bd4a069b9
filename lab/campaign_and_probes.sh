#!/usr/bin/env bash
# One device call on a 4-GPU machine that serves two issues at once: GPUs 0-2 evaluate the
# campaign's pending outbox jobs (issue 22, benchmarks/outbox_gpu.sh), GPU 3 first runs issue 21's
# PROBES (default: the memory footprint of the largest suite tasks, lab/memory_peak.sh;
# "budget" adds the A/A at a 25 ms timing budget first; "grid:cudal2" or "grid:llm" tunes issue
# 23's GEMM grid on GPU 3 until the deadline, lab/gemm_grid.sh, carry .whl .cutlass_libs
# .gemm_grid), then evaluates the newest fifth of the pending jobs (a disjoint share, so no job
# runs twice) if time is left. Each side stops at the deadline.
# Keep SECONDS below the call's own limit (the device time left, less about 40 s of start-up).
# A device call brings back at most 8 files: the probes' files (GPU 3's campaign results too) are
# packed into OUT/probes.tgz after each step (the 2026-11-26 s17 call lost its campaign
# results.tgz among 21 loose files).
# Usage: [PROBES="budget memory"] bash lab/campaign_and_probes.sh OUT_DIR OUTBOX [SECONDS]
# Back on the loop's machine: tar xzf OUT/campaign/results.tgz -C OUTBOX/results, and the same
# for probes.tgz's c3/results.tgz.
set -uo pipefail
OUT=${1:?usage: campaign_and_probes.sh OUT_DIR OUTBOX [SECONDS]}
BOX=${2:?OUTBOX}
T=${3:-480}
HERE=$(cd "$(dirname "$0")" && pwd)
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac
mkdir -p "$OUT"
end=$(( $(date +%s) + T ))
SPLIT=$(mktemp -d /tmp/split.XXXXXX)
PROBES=${PROBES:-memory} python3 - "$BOX" "$SPLIT" <<'PY'
import os, shutil, sys
from pathlib import Path
box, split = Path(sys.argv[1]), Path(sys.argv[2])
pending = sorted((p for p in (box / "jobs").glob("*.json") if not (box / "results" / p.name).exists()),
                 key=lambda p: p.stat().st_mtime)
k = 0 if "grid:" in os.environ.get("PROBES", "") else len(pending) // 5  # the grid keeps GPU 3 to the end
for name, part in (("a", pending[:len(pending) - k]), ("b", pending[len(pending) - k:])):
    (split / name / "jobs").mkdir(parents=True)
    (split / name / "results").mkdir()
    for p in part:
        shutil.copy2(p, split / name / "jobs" / p.name)
print(f"{len(pending)} pending jobs: {len(pending) - k} for GPUs 0-2, {k} for GPU 3 after its probes")
PY
CUDA_VISIBLE_DEVICES=0,1,2 COMPILE_WORKERS=${COMPILE_WORKERS:-12} bash "$HERE/../benchmarks/outbox_gpu.sh" "$OUT/campaign" "$SPLIT/a" "$T" \
  > "$OUT/campaign.log" 2>&1 &
PROBE_DIR=$(mktemp -d /tmp/probes.XXXXXX)
pack() { tar czf "$OUT/.probes.tgz.tmp" -C "$PROBE_DIR" . && mv "$OUT/.probes.tgz.tmp" "$OUT/probes.tgz"; }
(
  export CUDA_VISIBLE_DEVICES=3
  for probe in ${PROBES:-memory}; do
    left=$(( end - $(date +%s) ))
    case $probe in
      budget) BUDGETS=25 bash "$HERE/timing_budget.sh" "$PROBE_DIR/budget" $(( left / 2 )) ;;
      memory) timeout "$left" bash "$HERE/memory_peak.sh" "$PROBE_DIR/memory" ;;
      grid:*) bash "$HERE/gemm_grid.sh" "$PROBE_DIR/grid" "${probe#grid:}" $(( left - 20 )) ;;
    esac
    pack
  done
  left=$(( end - $(date +%s) ))
  [ "$left" -gt 60 ] && COMPILE_WORKERS=4 bash "$HERE/../benchmarks/outbox_gpu.sh" "$PROBE_DIR/c3" "$SPLIT/b" "$left"
  pack
) > "$OUT/probes.log" 2>&1
wait
tail -3 "$OUT/campaign.log"; tail -12 "$OUT/probes.log"; ls -R "$OUT"
