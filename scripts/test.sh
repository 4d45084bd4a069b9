#!/usr/bin/env bash
# Set up and run warpforge's test suite on a fresh machine (CPU is enough; GPU tests are skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
source scripts/_install.sh
install_warpforge "$PY" test
# type-check the package (ARCHITECTURE.md, "Conventions": type hints are honest), then the tests; Triton kernels run
# on the CPU through Triton's interpreter, GPU tests are skipped without CUDA. The default lane
# leaves out tests marked slow (pyproject.toml); `bash scripts/test.sh -m slow` runs those.
"$PY" -m mypy
exec "$PY" -m pytest -q -p no:cacheprovider --durations=15 "$@"
