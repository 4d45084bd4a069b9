#!/usr/bin/env bash
# Set up warpforge and run its main job: evaluate and benchmark the bundled example kernels
# against their reference programs (on the GPU when one is visible, else on the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
source scripts/_install.sh
install_warpforge "$PY" triton
exec "$PY" -m warpforge.cli demo "$@"
