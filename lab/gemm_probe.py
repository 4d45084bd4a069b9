"""Why does torch.matmul read slower than cuBLASLt's heuristic pick on some shapes? Kernel names
and two timings (harness, back-to-back hot loop) for torch.matmul and nvmath.

    python lab/gemm_probe.py > probe.txt
    python lab/gemm_probe.py --compile > probe.txt   # the same for torch.compile(max-autotune),
                                                            # with and without its CUDA graphs
"""

from __future__ import annotations

import sys

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


COMPILE_SHAPES = [(128, 64, 8192), (64, 4096, 4096), (1024, 1024, 1024), (4096, 4096, 4096)]


def main() -> None:
    print("preferred blas", torch.backends.cuda.preferred_blas_library(), "torch", torch.__version__)
    probe_compile = "--compile" in sys.argv
    for m, n, k in COMPILE_SHAPES if probe_compile else SHAPES:
        shape = GemmShape(m, n, k)
        sb = ShapeBench(shape, "nn", "cuda", 0)
        a, b = sb.sets[0]
        fns = {"torch": sb.fn("torch")}
        if probe_compile:
            for mode in ("max-autotune", "max-autotune-no-cudagraphs"):
                fns[mode] = torch.compile(lambda a, b: torch.matmul(a, b), mode=mode, dynamic=False)
        else:
            fns["cublaslt:0"] = sb.fn("cublaslt:0")
        for name, fn in fns.items():
            harness = sb.time(fn, FINAL)
            print(f"{m}x{n}x{k} {name:26s} harness {harness['ms'] * 1000:8.1f} us (host {harness['host_ms'] * 1000:7.1f} us)"
                  f"  hot {hot(fn, a, b):8.1f} us  kernels {kernels(fn, a, b)}", flush=True)


if __name__ == "__main__":
    main()
