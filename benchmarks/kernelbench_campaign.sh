#!/usr/bin/env bash
# The KernelBench campaign, the loop's side (docs/kernelbench.md): warpforge's own strategies over the
# committed 30-task sample, the model answering through an inbox (a coding agent, or a person),
# candidates evaluated on the GPU machine through an outbox (benchmarks/outbox_gpu.sh there).
# Runs until every task has its budget of candidates; stop it any time, the same command resumes.
# Usage: [CONCURRENCY=128] bash benchmarks/kernelbench_campaign.sh CAMPAIGN_DIR [CANDIDATES_PER_TASK] [GENERATION_SIZE]
#   CAMPAIGN_DIR/inbox   requests (<id>.request.md) the model answers with <id>.reply.md
#   CAMPAIGN_DIR/outbox  jobs/ for the GPU machine, results/ brought back from it
#   CAMPAIGN_DIR/kb.db   the archive
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0;; esac  # the comment above
set -uo pipefail
DIR=${1:?usage: kernelbench_campaign.sh CAMPAIGN_DIR [CANDIDATES_PER_TASK] [GENERATION_SIZE]}
N=${2:-8}; G=${3:-4}
cd "$(dirname "$0")/.."
KB=${KB:-.kb/KernelBench}
[ -d "$KB" ] || { echo "no KernelBench checkout at $KB (python benchmarks/kernelbench_prep.py, or KB=PATH)" >&2; exit 2; }
mapfile -t TASKS < <(python3 -c "import json,sys; [print(sys.argv[1] + '/' + t['path']) for t in json.load(open('benchmarks/results/kernelbench_campaign_sample.json'))['tasks']]" "$KB")
mkdir -p "$DIR"
exec python3 -m warpforge.cli optimize "${TASKS[@]}" --device cuda --llm "inbox(${MODEL_NAME:-coding-agent}):$DIR/inbox" \
  --llm-timeout 86400 --outbox "$DIR/outbox" --archive "$DIR/kb.db" --max-candidates "$N" --generation-size "$G" \
  --concurrency "${CONCURRENCY:-128}" --no-live
