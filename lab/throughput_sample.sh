#!/usr/bin/env bash
# Issue 21: the corpus mix in one device call (about 7 minutes on an H100): warpforge's local
# executor on a stratified sample of the 100-candidate corpus, then the KernelBench-style
# serial evaluator on a smaller stratified sample of the same items, on the same GPU.
# Usage: bash lab/throughput_sample.sh OUT_DIR [SAMPLE] [SERIAL_SAMPLE] [POOL_TIMEOUT_S]
set -uo pipefail
OUT=${1:?usage: throughput_sample.sh OUT_DIR [SAMPLE] [SERIAL_SAMPLE] [POOL_TIMEOUT_S]}
N=${2:-36}; S=${3:-12}; T=${4:-250}
source "$(dirname "$0")/../benchmarks/_gpu_env.sh"
mkdir -p "$OUT"
gpu_facts | tee "$OUT/gpu.txt"
step "warpforge, $N candidates"
timeout "$T" python3 benchmarks/throughput.py --out "$OUT/pool" --skip-serial --sample "$N" > "$OUT/pool.log" 2>&1
tail -3 "$OUT/pool.log"
step "serial, $S of them"
timeout 150 python3 benchmarks/throughput.py --out "$OUT/serial" --skip-pool --sample "$N" --serial-sample "$S" \
  > "$OUT/serial.log" 2>&1
tail -12 "$OUT/serial.log"
rm -rf "$OUT/pool/corpus" "$OUT/serial/corpus"
tar czf /tmp/all.tgz -C "$OUT" . && mv /tmp/all.tgz "$OUT/all.tgz"
