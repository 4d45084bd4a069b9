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
