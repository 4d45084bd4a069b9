#!/usr/bin/env bash
# Issue 23: the CUTLASS sm90 family's first GPU run (docs/gemm.md, "The CUTLASS sm90 family"), in
# one device call: the headers from the nvidia-cutlass wheel carried in .whl/ (the GPU machine has
# no network), every fp16 configuration built for both layouts (and the GPU tests' bf16 ones) with
# one nvcc per core, the GPU tests, then `gemm tune` on a sample of the llm shapes with the family
# beside torch.matmul. Everything goes into OUT/all.tgz (a call brings back at most 8 files).
# PREBUILT="DIR ...": libraries built here beforehand (.cutlass_libs/nn ...), copied in so only what is
# missing is built on the GPU machine (a library's name carries the hash of its source, flags and headers).
# Usage: [SHAPES=llm|cudal2] [LAYOUTS="nn nt"] [TESTS=1] [PREBUILT=...] bash lab/cutlass_gpu_check.sh OUT_DIR [SAMPLE]
set -uo pipefail
OUT=${1:?usage: cutlass_gpu_check.sh OUT_DIR [LLM_SAMPLE]}
HERE=$(cd "$(dirname "$0")" && pwd)
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac
source "$HERE/../benchmarks/_gpu_env.sh"
W=$(mktemp -d /tmp/cutlass_check.XXXXXX)
mkdir -p "$OUT"
pack() { tar czf "$OUT/.all.tgz.tmp" -C "$W" . && mv "$OUT/.all.tgz.tmp" "$OUT/all.tgz"; }
gpu_facts | tee "$W/gpu.txt"
python3 -m zipfile -e .whl/nvidia_cutlass-*.whl /tmp/cutlass_pkg
export WARPFORGE_CUTLASS_INCLUDE=/tmp/cutlass_pkg/cutlass_library/source/include WARPFORGE_CUTLASS_LIB_DIR=/tmp/cutlass_libs
mkdir -p "$WARPFORGE_CUTLASS_LIB_DIR"
for d in ${PREBUILT:-}; do cp "$d"/*.so "$WARPFORGE_CUTLASS_LIB_DIR"/; done
step "build"
python3 - <<'PY' 2>&1 | tee "$W/build.json"
import json, os, time
from pathlib import Path
from warpforge.gemm import cutlass_build as b, cutlass_sm90 as c
gpu_tests = ["cutlass_128x128x64_c1x1_coop", "cutlass_128x256x64_c2x1_coop", "cutlass_256x128x64_c1x2_coop",
             "cutlass_64x128x64_c1x1_pingpong", "cutlass_64x256x64_c2x1_pingpong", "cutlass_128x128x64_c1x2_pingpong",
             "cutlass_128x128x64_c1x1_streamk", "cutlass_128x256x64_c1x1_streamk"]
layouts = os.environ.get("LAYOUTS", "nn nt").split()
todo = [(cfg, "float16", lay) for cfg in c.configs() for lay in layouts]
if os.environ.get("TESTS", "1") == "1":
    todo += [(c.CutlassConfig.from_name(n), "bfloat16", lay) for n in gpu_tests for lay in ("nn", "nt")]
t = time.time()
built = b.build_all(todo, out_dir=Path("/tmp/cutlass_libs"))
print(json.dumps({"instances": len(todo), "seconds": round(time.time() - t, 1), "built": sum(b.path is not None for b in built),
                  "build_s": sorted(b.seconds for b in built),
                  "failed": [[b.cfg.name, b.dtype, b.layout, (b.error or "")[:400]] for b in built if b.path is None]}))
PY
pack
[ "${TESTS:-1}" = 1 ] && step "GPU tests" && timeout 150 python3 -m pytest -q -m gpu tests/test_gemm_cutlass.py 2>&1 | tail -25 | tee "$W/pytest_gpu.log"
pack
SHAPES=${SHAPES:-llm}
step "tune: $SHAPES sample"
timeout 200 python3 -m warpforge.cli gemm tune --shapes "$SHAPES" --sample "${2:-8}" --families cutlass --no-cublaslt \
  --out "$W/tune_$SHAPES" 2>&1 | tail -30 | tee "$W/tune_$SHAPES.log"
pack
ls -la "$OUT"
