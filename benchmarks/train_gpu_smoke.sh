#!/usr/bin/env bash
# The training pipeline's GPU smoke run: the whole CUDA-L1 pipeline on GPU tasks with a small model built from
# a config (no download). Seed an archive with three verified GPU kernels through agent mode,
# build the datasets, SFT until the model reproduces the training kernels (on the CPU, 400 steps
# of this model reached a loss of 1.9e-3 per token (benchmarks/train_cpu_memorise.sh) and 3 of 4 sampled programs were correct; 80
# steps, as in the 2026-11-23 run, left it at 49 % token accuracy and no program), one self-training
# round, a few GRPO steps whose rewards come from the evaluator on the GPU, a held-out round,
# and the plot page. Usage: bash benchmarks/train_gpu_smoke.sh OUT_DIR
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0;; esac  # the comment above
set -euo pipefail
OUT=${1:?usage: train_gpu_smoke.sh OUT_DIR}
W=$OUT/work
mkdir -p "$W"
python -c 'import json, sys; from warpforge.evaluate.hardware import fingerprint; print(json.dumps(fingerprint(sys.argv[1])))' cuda > "$OUT/machine.json"  # the machine's facts
wf() { python -m warpforge.cli "$@"; }
step() { echo; echo "== $(date -u +%H:%M:%S) $*"; }

step "seed archive: three GPU kernels through agent mode"
for pair in relu:relu__triton softmax:softmax__triton layernorm:layernorm__triton; do
  wf agent eval "level1/${pair%%:*}" "examples/gpu/${pair#*:}.py" --device cuda \
     --archive "$W/a.db" --agent-name seed | python -c 'import json,sys; d=json.load(sys.stdin); print(d["task"], d["status"], d["speedup"])'
done
step "model from a config"
wf train tiny-model "$W/model" --hidden 128 --layers 2
step "datasets (layernorm held out)"
wf train data --archive "$W/a.db" --out "$W/data" --tasks level1/relu level1/softmax level1/layernorm \
   --eval-tasks level1/layernorm --device cuda
step "SFT"
wf train sft --model "$W/model" --data "$W/data/sft_train.jsonl" --out "$W/sft" --max-steps ${SFT_STEPS:-400} \
   --batch-size 2 --lr 3e-3 --save-steps 1000
step "self-training round"
wf train self-train --model "$W/sft/final" --tasks level1/relu level1/softmax --sft "$W/data/sft_train.jsonl" \
   --archive "$W/a.db" --n 4 --max-new-tokens 700 --device cuda --gen-device cuda
step "GRPO"
wf train grpo --model "$W/sft/final" --data "$W/data/grpo_train.jsonl" --out "$W/grpo" --archive "$W/a.db" \
   --device cuda --num-generations 4 --max-completion-length 700 --max-steps 4 --batch-size 4 --lr 1e-5 --save-steps 2
step "GRPO resumed for 2 more steps"
wf train grpo --model "$W/sft/final" --data "$W/data/grpo_train.jsonl" --out "$W/grpo" --archive "$W/a.db" \
   --device cuda --num-generations 4 --max-completion-length 700 --max-steps 6 --batch-size 4 --lr 1e-5 --save-steps 2
step "held out"
wf train heldout --model "$W/grpo/final" --tasks level1/layernorm level1/relu --archive "$W/a.db" --out "$W/eval" \
   --n 4 --max-new-tokens 700 --device cuda --gen-device cuda
step "plot"
wf train plot "$W/sft" "$W/grpo" "$W/data" "$W/eval" --out "$W/page"
step "archive"
wf archive ls --archive "$W/a.db"
tar -C "$W" -czf "$OUT/train_gpu_smoke.tgz" --exclude='*/checkpoint-*' --exclude='*/final' --exclude=model a.db data \
    sft/log.jsonl grpo/log.jsonl grpo/rewards.jsonl eval page
