#!/usr/bin/env bash
# The README's test command on a busy machine: scripts/test.sh with load beside it (issue 39).
#   bash scripts/test_busy.sh [steady|bursty|mixed] [pytest args...]
# starts 2 load processes per 2 cores (scripts/busy_load.py; default mixed: one steady busy loop and
# one bursty one per 2 cores), runs scripts/test.sh with the rest of the arguments, stops the load
# and exits with the tests' code. No test may pass or fail with the load: run it before landing,
# with steady and with bursty load.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
KIND=${1:-mixed}
case "$KIND" in steady|bursty|mixed) shift || true ;; *) KIND=mixed ;; esac
"$PY" scripts/busy_load.py 7200 "$KIND" 2 &
load=$!
trap 'kill "$load" 2>/dev/null; wait "$load" 2>/dev/null' EXIT
echo "test_busy: $KIND load beside the tests (pid $load), load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
bash scripts/test.sh "$@"
rc=$?
echo "test_busy: tests exited $rc with $KIND load; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exit "$rc"
