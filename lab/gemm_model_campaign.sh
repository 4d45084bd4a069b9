#!/usr/bin/env bash
# Issue 23, part 4: model-written GEMM kernels for the shape classes where no family of ours wins
# (measured on an H100, docs/gemm.md): few output tiles over a long K (128x2048x12288 nn), a
# decode-time projection (16x4096x14336 nt) and a latency-bound small one (1024x512x512 nn). The
# loop's own strategies over the three `warpforge gemm task` files in lab/gemm_model_tasks/,
# the model answering through an inbox (a coding agent, or a person), candidates evaluated on the
# GPU machine through an outbox (benchmarks/outbox_gpu.sh there, as in issue 22's campaign).
# Stop it any time; the same command resumes. Then the verified winners are timed by the tuner
# beside every family: warpforge gemm tune --shapes SHAPES.csv --candidate BEST.py
# Usage: bash lab/gemm_model_campaign.sh CAMPAIGN_DIR [CANDIDATES_PER_TASK] [GENERATION_SIZE]
set -uo pipefail
DIR=${1:?usage: gemm_model_campaign.sh CAMPAIGN_DIR [CANDIDATES_PER_TASK] [GENERATION_SIZE]}
N=${2:-4}; G=${3:-4}
cd "$(dirname "$0")/.."
mkdir -p "$DIR"
exec python3 -m warpforge.cli optimize lab/gemm_model_tasks/*.py --device cuda \
  --llm "inbox(${MODEL_NAME:-coding-agent}):$DIR/inbox" --llm-timeout 86400 --outbox "$DIR/outbox" \
  --archive "$DIR/gemm.db" --max-candidates "$N" --generation-size "$G" --no-live
