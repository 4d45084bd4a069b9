"""Every way warpforge can compute one GEMM, by name — the baselines and our own kernels.

A *choice* is a string the tuner times, the dispatcher table stores and the benchmark reports:

| name | what runs |
|---|---|
| `torch` | `torch.matmul` in the layout the caller gave (cuBLAS) |
| `torch_padded` | K and N zero-padded to multiples of 8 per call, then `torch.matmul`, then the N columns copied out: cuBLAS's fast kernels need 16-byte rows |
| `cublaslt:<i>` | the i-th algorithm cuBLASLt's heuristic returns for this problem, through nvmath-python |
| `cublaslt:<i>/splitk<k>`, `cublaslt:<i>/swz0`, `…/swz1` | that algorithm reconfigured within its capabilities: split-K into k parts (with a reduction scheme it supports), or CTA swizzling set; checked by `cublasLtMatmulAlgoCheck`, which also sizes its workspace |
| `triton_<family>:<params>` | one of our Triton kernels (triton_gemm.py) |
| `mma_<params>` | our CUDA C++ mma.sync kernel (cuda_mma.py), compiled with NVRTC |
| `cutlass_<params>[/<raster><swizzle> or /k<splits>]` | a CUTLASS 3.x wgmma + TMA kernel for Hopper (cutlass_sm90.py), a shared library built with nvcc; the suffix sets its tile scheduler's raster order and swizzle, or a stream-K configuration's split-K factor |
| `file:<path>` | a candidate file (`class ModelNew`, forward(a, b)) — e.g. the best kernel of `warpforge optimize` on a task from `warpforge gemm task` |

Layouts: "nn" means b is a (K, N) matrix; "nt" means b is the (N, K) weight of x @ W.T (what
nn.Linear stores). `a` is always (M, K) row-major. Every choice returns a new (M, N) tensor in the
input dtype, computed with fp32 accumulation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from warpforge.errors import UsageError
from warpforge.gemm.cublaslt import CublasLt
from warpforge.gemm.layout import GemmFn, b_view, check_layout
from warpforge.gemm.shapes import GemmShape

def torch_dtype(name: str) -> torch.dtype:
    return {"float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def make_inputs(shape: GemmShape, layout: str, device: str | torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh random operands (normal, so no 0/1 shortcut passes), B shaped for `layout`."""
    check_layout(layout)
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = torch_dtype(shape.dtype)
    a = torch.randn((shape.M, shape.K), generator=gen, device=device, dtype=torch.float32).to(dtype)
    b_shape = (shape.K, shape.N) if layout == "nn" else (shape.N, shape.K)
    b = torch.randn(b_shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
    return a, b


def reference(a: torch.Tensor, b: torch.Tensor, layout: str) -> torch.Tensor:
    """fp32 product with TF32 off (fp64 on the CPU, where it is cheap)."""
    bb = b if layout == "nn" else b.t()
    if a.device.type == "cpu":
        return (a.double() @ bb.double()).float()
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return a.float() @ bb.float()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref||; inf when the output is the wrong shape or holds a NaN/inf."""
    if tuple(out.shape) != tuple(ref.shape):
        return math.inf
    o = out.float()
    if not torch.isfinite(o).all():
        return math.inf
    return float((o - ref).norm() / ref.norm().clamp_min(1e-30))


def tolerance(dtype: str) -> float:
    """Relative L2 error allowed. fp16 in / fp32 accumulate lands at ~2e-4 for every backend on an
    H100 (research note §5); bf16 has 3 fewer mantissa bits. An fp16-accumulating kernel lands
    near 1e-2 and fails."""
    return 1e-3 if dtype == "float16" else 8e-3


def torch_choice(layout: str) -> GemmFn:
    return lambda a, b: torch.matmul(a, b_view(b, layout))


def padded_choice(layout: str) -> GemmFn:
    def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        K = a.shape[1]
        N = b.shape[1] if layout == "nn" else b.shape[0]
        pk, pn = -K % 8, -N % 8
        ap = F.pad(a, (0, pk)) if pk else a
        if layout == "nn":
            bp = F.pad(b, (0, pn, 0, pk)) if pk or pn else b
        else:
            bp = (F.pad(b, (0, pk, 0, pn)) if pk or pn else b).t()
        out = torch.matmul(ap, bp)
        return out[:, :N].contiguous() if pn else out

    return run


def make_choice(name: str, layout: str, a: torch.Tensor, b: torch.Tensor) -> GemmFn:
    """The function for choice `name`; `a` and `b` are example operands (they fix the problem)."""
    check_layout(layout)
    if name == "torch":
        return torch_choice(layout)
    if name == "torch_padded":
        return padded_choice(layout)
    if name.startswith("cublaslt:"):
        return CublasLt.for_problem(a, b, layout).call(name)
    if name.startswith("triton_"):
        from warpforge.gemm import triton_gemm

        cfg = triton_gemm.TritonConfig.from_name(name)
        return lambda x, y: triton_gemm.matmul(x, y, cfg, layout)
    if name.startswith("mma_"):
        from warpforge.gemm import cuda_mma

        mcfg = cuda_mma.MmaConfig.from_name(name)
        return lambda x, y: cuda_mma.matmul(x, y, mcfg, layout)
    if name.startswith("cutlass_"):
        from warpforge.gemm import cutlass_sm90

        ccfg, raster, swizzle, splits = cutlass_sm90.parse_choice(name)
        dtype = {torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(a.dtype)
        if dtype is None:
            raise UsageError(f"the CUTLASS kernels take float16 or bfloat16, not {a.dtype}")
        # built (or loaded) now, not at the first call: a missing nvcc or header, or a GPU that is not
        # Hopper, is a UsageError here, which the dispatcher turns into torch.matmul
        cutlass_sm90.kernel(ccfg, dtype, layout, a.device)
        return lambda x, y: cutlass_sm90.matmul(x, y, ccfg, layout, raster, swizzle, splits)
    if name.startswith("file:"):
        return candidate_choice(name.split(":", 1)[1], a.device)
    raise UsageError(f"unknown GEMM choice {name!r}: expected torch, torch_padded, cublaslt:<i>, triton_<family>:..., "
                     "mma_..., cutlass_..., file:<candidate.py>")


_candidates: dict[tuple[str, str], GemmFn] = {}


def candidate_choice(path: str, device: torch.device) -> GemmFn:
    """A candidate kernel file as a choice: its `ModelNew()` called as forward(a, b), with b in the
    task's layout. It runs in this process (the tuner verifies it again like every choice), so
    only name files you trust — e.g. ones the sandboxed evaluator already accepted."""
    import importlib.util
    from pathlib import Path

    key = (str(Path(path).resolve()), str(device))
    if key not in _candidates:
        if not Path(path).is_file():
            raise UsageError(f"candidate kernel {path} does not exist")
        spec = importlib.util.spec_from_file_location(f"warpforge_gemm_candidate_{len(_candidates)}", path)
        if spec is None or spec.loader is None:
            raise UsageError(f"cannot import {path} as a Python module")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not hasattr(module, "ModelNew"):
            raise UsageError(f"{path} defines no class ModelNew: it is not a warpforge candidate")
        model = module.ModelNew().to(device)
        _candidates[key] = lambda x, y: model(x, y)
    return _candidates[key]
