"""Why does torch.matmul read slower than cuBLASLt's heuristic pick on some shapes? Kernel names
and three timings (harness, back-to-back hot loop, CUDA graph) for torch.matmul and nvmath.

    python benchmarks/gemm_probe.py > probe.txt
"""

from __future__ import annotations

import torch

from warpforge.gemm import choices
from warpforge.gemm.shapes import GemmShape
from warpforge.gemm.tune import FINAL, ShapeBench

SHAPES = [(128, 64, 128), (256, 128, 512), (1024, 1024, 128), (8192, 12288, 4096), (16384, 12288, 512)]


def hot(fn, a, b, n=50):
    for _ in range(3):
        fn(a, b)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(2_000_000)
    s.record()
    for _ in range(n):
        fn(a, b)
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / n * 1000


def kernels(fn, a, b):
    fn(a, b)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(a, b)
        torch.cuda.synchronize()
    return [(e.name[:70], round(e.device_time, 1)) for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


print("preferred blas", torch.backends.cuda.preferred_blas_library(), "torch", torch.__version__)
for m, n, k in SHAPES:
    shape = GemmShape(m, n, k)
    sb = ShapeBench(shape, "nn", "cuda", 0)
    a, b = sb.sets[0]
    for name in ("torch", "cublaslt:0"):
        fn = sb.fn(name)
        harness = sb.time(fn, FINAL)["ms"] * 1000
        print(f"{m}x{n}x{k} {name:11s} harness {harness:8.1f} us  hot {hot(fn, a, b):8.1f} us  kernels {kernels(fn, a, b)}")
