#!/usr/bin/env bash
# How long SFT must run before the tiny model reproduces a kernel it was trained on (CPU).
# Seeds an archive with examples/softmax_triton.py, trains a hidden-128, 2-layer model on that one
# row, then samples 4 programs for the task (temperature 1) and has the evaluator check them.
# Usage: bash benchmarks/train_cpu_memorise.sh OUT [STEPS]   (400 steps: ~3 min on 2 cores)
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0;; esac  # the comment above
set -euo pipefail
OUT=${1:?usage: train_cpu_memorise.sh OUT [STEPS]}
STEPS=${2:-400}
wf() { python -m warpforge.cli "$@"; }
mkdir -p "$OUT"
python -c 'import json, sys; from warpforge.evaluate.hardware import fingerprint; print(json.dumps(fingerprint(sys.argv[1])))' cpu > "$OUT/machine.json"  # the machine's facts
wf agent eval level1/softmax examples/softmax_triton.py --archive "$OUT/a.db" --device cpu --agent-name seed >/dev/null
wf train tiny-model "$OUT/tiny" --hidden 128 --layers 2
wf train data --archive "$OUT/a.db" --out "$OUT/data" --tasks level1/softmax --eval-fraction 0 --device cpu
wf train sft --model "$OUT/tiny" --data "$OUT/data/sft_train.jsonl" --out "$OUT/sft" --max-steps "$STEPS" \
   --batch-size 1 --lr 3e-3 --save-steps 100000 --cpu
wf train heldout --model "$OUT/sft/final" --tasks level1/softmax --archive "$OUT/a.db" --out "$OUT/eval" --n 4 \
   --device cpu --max-new-tokens 700
python - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
log = [json.loads(l) for l in open(f"{out}/sft/log.jsonl")]
losses = [h["loss"] for h in log if "loss" in h]
print("last SFT loss:", losses[-1])
print("held out:", open(f"{out}/eval/rounds.jsonl").read().strip().splitlines()[-1])
PY
