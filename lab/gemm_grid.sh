#!/usr/bin/env bash
# Issue 23's whole grid, across device calls: `gemm tune` of every shape of SET (cudal2: 1,000,
# llm: 306) on all GPUs of the machine with every family (triton, mma, cutlass) and cuBLASLt,
# resuming from the records of earlier calls, stopped at SECONDS; the records are packed into
# OUT/records.tgz every 30 s and at the end (a device call brings back at most 8 files, and one
# cut by its limit must still bring back what was tuned); the GPU's facts and the log's end go to
# OUT/grid.log: two files a call.
#   here, once: CUTLASS libraries for the grid's layout (cudal2: nn, llm: nt; python:
#               cutlass_build.build_all(..., out_dir=Path(".cutlass_libs/nn")), see docs/gemm.md; 20 MB
#               a layout in fp16), nvmath-python's wheel in .whl/ (docs/gemm.md has the pip download)
#   each call:  bash lab/gemm_grid.sh OUT cudal2 480    (carry .whl .cutlass_libs/nn .gemm_grid/cudal2 .sandbox,
#               or .carry with both layouts packed as below instead of .cutlass_libs/nn)
#   back here:  mkdir -p .gemm_grid/cudal2 && tar xzf OUT/records.tgz -C .gemm_grid/cudal2 && gzip -f .gemm_grid/cudal2/*.jsonl
# A call carries at most 64 MiB with the tracked tree (about 29 MB): the records travel gzipped
# (read as *.jsonl.gz here). .whl needs only nvmath-python's wheel once the libraries are built: a
# machine without CUTLASS headers takes carried libraries of any CUTLASS version of the same
# source. Without nvmath, or without any CUTLASS library, `gemm tune` stops at once rather than
# record every shape without them (both happened on 2026-11-27, before that check).
# The table: python -m warpforge.cli gemm tune ... reads them all; docs/gemm.md says how they are summarised.
set -uo pipefail
OUT=${1:?usage: gemm_grid.sh OUT_DIR SET [SECONDS]}
SET=${2:?SET: cudal2 or llm}
T=${3:-480}
HERE=$(cd "$(dirname "$0")" && pwd)
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac
source "$HERE/../benchmarks/_gpu_env.sh"
carried_wheels || exit 1
LAYOUT=$([ "$SET" = llm ] && echo nt || echo nn)  # what `gemm tune --layout auto` picks for the set
# both layouts gzipped travel as one file (13 MB instead of 42): tar czf .carry/cutlass_libs.tgz -C .cutlass_libs nn nt
[ -f .carry/cutlass_libs.tgz ] && [ ! -d .cutlass_libs/$LAYOUT ] && mkdir -p .cutlass_libs && tar xzf .carry/cutlass_libs.tgz -C .cutlass_libs
[ -d .cutlass_libs/$LAYOUT ] && export WARPFORGE_CUTLASS_LIB_DIR=$PWD/.cutlass_libs/$LAYOUT
W=$(mktemp -d /tmp/grid.XXXXXX)
mkdir -p "$OUT" .gemm_grid/"$SET"
cp .gemm_grid/"$SET"/*.jsonl "$W"/ 2>/dev/null
for f in .gemm_grid/"$SET"/*.jsonl.gz; do [ -e "$f" ] && gunzip -c "$f" > "$W/$(basename "$f" .gz)"; done
echo "$(cat "$W"/*.jsonl 2>/dev/null | wc -l) records carried"
pack() { tar czf "$OUT/.records.tgz.tmp" -C "$W" . && mv "$OUT/.records.tgz.tmp" "$OUT/records.tgz"; }
gpu_facts | tee "$OUT/grid.log"
( while sleep 30; do pack; done ) &
PACKER=$!
timeout "$T" python3 -m warpforge.cli gemm tune --shapes "$SET" --gpus all --families triton,mma,cutlass \
  --out "$W" 2>&1 | tail -8 | tee -a "$OUT/grid.log"
kill "$PACKER" 2>/dev/null
pack
echo "$(cat "$W"/*.jsonl | wc -l) records in $OUT/records.tgz"
for f in "$W"/tune*.jsonl; do gzip -c "$f" > .gemm_grid/"$SET"/"$(basename "$f")".gz; done  # for a script after this one
