"""The two GEMM layouts every choice takes: "nn", b is a (K, N) matrix; "nt", b is the (N, K)
weight of x @ W.T (what nn.Linear stores). `a` is always (M, K) row-major."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from warpforge.errors import UsageError

if TYPE_CHECKING:  # (cuda_mma.py imports this module without torch)
    import torch

LAYOUTS = ("nn", "nt")

GemmFn = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]
"""A GEMM choice: (a, b in the layout) -> a new (M, N) tensor."""


def check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise UsageError(f"unknown GEMM layout {layout!r}: use nn (b is K x N) or nt (b is the N x K weight)")


def b_view(b: torch.Tensor, layout: str) -> torch.Tensor:
    """b as the (K, N) operand of a @ b."""
    return b if layout == "nn" else b.t()


TORCH_DTYPES = {"torch.float16": "float16", "torch.bfloat16": "bfloat16"}
"""The dtypes our CUDA kernel families take, by torch's name, to theirs."""


def check_operands(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, layout: str, family: str,
                   loads: str) -> tuple[int, int, int, str]:
    """(M, N, K, dtype name) of a valid call of one of our CUDA kernels (`family`, named in the
    errors); UsageError naming the first problem otherwise. Every operand must be a contiguous 2-D
    CUDA tensor of one dtype and device, starting 16-byte aligned (for `loads`: cp.async, TMA)."""
    if layout not in LAYOUTS:
        raise UsageError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    for name, t in (("a", a), ("b", b), ("out", out)):
        if not t.is_cuda:
            raise UsageError(f"{name} must be a CUDA tensor, got one on {t.device}")
        if t.dim() != 2:
            raise UsageError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
        if not t.is_contiguous():
            raise UsageError(f"{name} must be contiguous (row-major): call .contiguous() first")
        if t.dtype != a.dtype:
            raise UsageError(f"a, b and out must share one dtype, got {a.dtype}, {b.dtype} and {out.dtype}")
        if t.device != a.device:
            raise UsageError(f"a, b and out must be on one device, got {a.device}, {b.device} and {out.device}")
        if t.data_ptr() % 16:
            raise UsageError(f"{name} must start 16-byte aligned for {loads} (a view at an odd offset is not)")
    dtype = TORCH_DTYPES.get(str(a.dtype))
    if dtype is None:
        raise UsageError(f"{family} takes float16 or bfloat16 tensors, got {a.dtype}")
    m, k = a.shape
    n, kb = (b.shape[1], b.shape[0]) if layout == "nn" else (b.shape[0], b.shape[1])
    if kb != k:
        want = f"({k}, N)" if layout == "nn" else f"(N, {k})"
        raise UsageError(f"b of shape {tuple(b.shape)} does not fit a of shape {tuple(a.shape)}: layout {layout} wants {want}")
    if tuple(out.shape) != (m, n):
        raise UsageError(f"out must have shape ({m}, {n}), got {tuple(out.shape)}")
    return m, n, k, dtype
