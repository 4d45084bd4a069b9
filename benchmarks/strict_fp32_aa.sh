#!/usr/bin/env bash
# The A/A in --strict-fp32 mode (TF32 off for matmuls and cuDNN in the reference's and the
# candidate's processes, the bar calibrated from that reference) of every convolution task of the
# built-in suite and of the KernelBench A/A sample (the tasks of
# benchmarks/results/kernelbench_h100_2026-11-25/aa_kernelbench*.jsonl whose program calls a
# convolution), on one GPU:
#   bash benchmarks/strict_fp32_aa.sh OUT_DIR [SECONDS]      # needs .kb/KernelBench (kernelbench_prep.py)
# writes OUT_DIR/aa_suite_conv_strict.jsonl and OUT_DIR/aa_kernelbench_conv_strict.jsonl (warpforge
# calibrate rows, each with "strict_fp32": true). Resumable: run it again with the same OUT_DIR and
# the tasks already there are skipped. Each task must be accepted, and read 1.00x as in the default
# mode; its tolerance is then its strict reference's own error x4 (docs/evaluation.md, "Precision").
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0;; esac  # the comment above
set -uo pipefail
OUT=${1:?usage: strict_fp32_aa.sh OUT_DIR [SECONDS]}
BUDGET=${2:-3000}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source "$(dirname "$0")/_gpu_env.sh"
END=$(( $(date +%s) + BUDGET ))
gpu_facts > "$OUT/machine_$(date -u +%Y%m%dT%H%M%S).txt" 2>&1
step "suite: the four convolution tasks"
timeout $(( END - $(date +%s) )) python3 -m warpforge.cli calibrate level1/conv2d level2/conv2d_batchnorm_relu \
  level2/conv_groupnorm_gelu level3/resnet_basic_block --strict-fp32 --device cuda --out "$OUT/aa_suite_conv_strict.jsonl" \
  2>&1 | tee -a "$OUT/calibrate.log" | tail -8
if [ -d .kb/KernelBench ]; then
  python3 - > "$OUT/kernelbench_conv_tasks.txt" <<'PY'
import glob, json, re
from pathlib import Path
names = {json.loads(line)["task"] for f in glob.glob("benchmarks/results/kernelbench_h100_2026-11-25/aa_kernelbench*.jsonl")
         for line in open(f) if line.strip()}
for name in sorted(names):
    path = Path(".kb/KernelBench") / f"{name}.py"
    if path.is_file() and re.search(r"nn\.Conv|nn\.functional\.conv|F\.conv|torch\.conv", path.read_text()):
        print(path)
PY
  step "KernelBench sample: $(wc -l < "$OUT/kernelbench_conv_tasks.txt") convolution tasks"
  # shellcheck disable=SC2046
  timeout $(( END - $(date +%s) )) python3 -m warpforge.cli calibrate $(cat "$OUT/kernelbench_conv_tasks.txt") \
    --strict-fp32 --device cuda --out "$OUT/aa_kernelbench_conv_strict.jsonl" 2>&1 | tee -a "$OUT/calibrate.log" | tail -8
else
  echo "no .kb/KernelBench: the KernelBench part needs benchmarks/kernelbench_prep.py first"
fi
