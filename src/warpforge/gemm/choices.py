"""Every way warpforge can compute one GEMM, by name — the baselines and our own kernels — and what
the tuner checks them with: operands, an fp32 reference, the relative error and its tolerance.

A *choice* is a string the tuner times, the dispatcher table stores and the benchmark reports; the
family that owns it (families.py) parses and builds it (`make_choice`):

| name | what runs |
|---|---|
| `torch` | `torch.matmul` in the layout the caller gave (cuBLAS; baselines.py) |
| `torch_padded` | K and N zero-padded to multiples of 8 per call, then `torch.matmul`, then the N columns copied out: cuBLAS's fast kernels need 16-byte rows (baselines.py) |
| `cublaslt:<i>` | the i-th algorithm cuBLASLt's heuristic returns for this problem, through nvmath-python (cublaslt.py) |
| `cublaslt:<i>/splitk<k>`, `cublaslt:<i>/swz0`, `…/swz1` | that algorithm reconfigured within its capabilities: split-K into k parts (with a reduction scheme it supports), or CTA swizzling set; checked by `cublasLtMatmulAlgoCheck`, which also sizes its workspace |
| `triton_<family>:<params>` | one of our Triton kernels (triton_gemm.py) |
| `mma_<params>` | our CUDA C++ mma.sync kernel (cuda_mma.py), compiled with NVRTC |
| `cutlass_<params>[/<raster><swizzle> or /k<splits>]` | a CUTLASS 3.x wgmma + TMA kernel for Hopper (cutlass_sm90.py), a shared library built with nvcc; the suffix sets its tile scheduler's raster order and swizzle, or a stream-K configuration's split-K factor |
| `file:<path>` | a candidate file (`class ModelNew`, forward(a, b)) — e.g. the best kernel of `warpforge optimize` on a task from `warpforge gemm task` (file_choice.py) |

Layouts: "nn" means b is a (K, N) matrix; "nt" means b is the (N, K) weight of x @ W.T (what
nn.Linear stores). `a` is always (M, K) row-major. Every choice returns a new (M, N) tensor in the
input dtype, computed with fp32 accumulation.
"""

from __future__ import annotations

import math

import torch

from warpforge.gemm import families
from warpforge.gemm.baselines import padded_choice, torch_choice
from warpforge.gemm.layout import GemmFn, check_layout
from warpforge.gemm.shapes import GemmShape

__all__ = ["GemmFn", "make_choice", "make_inputs", "padded_choice", "reference", "rel_error", "tolerance",
           "torch_choice", "torch_dtype"]


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


def make_choice(name: str, layout: str, a: torch.Tensor, b: torch.Tensor) -> GemmFn:
    """The function for choice `name`; `a` and `b` are example operands (they fix the problem).
    The one door the tuner and the dispatcher take to a kernel (tests replace it here)."""
    check_layout(layout)
    return families.make(name, layout, a, b)
