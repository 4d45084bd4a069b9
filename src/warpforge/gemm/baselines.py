"""The baselines every shape is timed against, as families: `torch` (torch.matmul in the caller's
layout, i.e. cuBLAS) and `torch_padded` (K and N zero-padded to multiples of 8 per call, where
cuBLAS's fast kernels need 16-byte rows). cuBLASLt's algorithms are the third (cublaslt.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from warpforge.errors import UsageError
from warpforge.gemm.family import GemmFamily, Problem
from warpforge.gemm.layout import GemmFn, b_view

if TYPE_CHECKING:
    from warpforge.gemm.shapes import GemmShape


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


class _OneChoice(GemmFamily):
    """A baseline with one configuration, named by the family's name."""

    ours = searched = False

    def owns(self, choice: str) -> bool:
        return choice == self.name

    def parse(self, choice: str) -> str:
        if choice != self.name:
            raise UsageError(f"{choice!r} is not the {self.name} baseline")
        return choice

    def why_not(self, choice: str, shape: GemmShape, layout: str, device: str) -> str | None:
        self.parse(choice)
        return None


class TorchFamily(_OneChoice):
    name = form = "torch"

    def configs(self, problem: Problem, limit: int, variants: int = 0) -> list[str]:
        return [self.name]

    def build(self, choice: str, layout: str, a: torch.Tensor, b: torch.Tensor) -> GemmFn:
        return torch_choice(layout)


class PaddedFamily(_OneChoice):
    """Only for shapes whose K or N is not a multiple of 8; handed on to the nearest unmeasured shapes."""

    name = form = "torch_padded"
    transferred = True

    def configs(self, problem: Problem, limit: int, variants: int = 0) -> list[str]:
        return [] if problem.shape.aligned else [self.name]

    def build(self, choice: str, layout: str, a: torch.Tensor, b: torch.Tensor) -> GemmFn:
        return padded_choice(layout)


TORCH = TorchFamily()
PADDED = PaddedFamily()
