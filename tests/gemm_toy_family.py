"""A toy GEMM family for tests/test_gemm_family.py: everything a family is, in one module.

`toy_bk<k>` sums a @ b over slices of K, `k` at a time, accumulating in fp32 with plain torch
operations (so it runs on the CPU); it refuses shapes whose K is not a multiple of its slice.
Registering it is one line (`families.REGISTERED`); the tuner, the dispatcher and `gemm tune
--families toy` then take it like any other family.
"""

from __future__ import annotations

import torch

from warpforge.errors import UsageError
from warpforge.gemm.family import GemmFamily, Problem
from warpforge.gemm.layout import GemmFn, b_view
from warpforge.gemm.shapes import GemmShape

SLICES = (8, 16, 32, 64)


def blocked_matmul(a: torch.Tensor, b: torch.Tensor, bk: int) -> torch.Tensor:
    out = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32, device=a.device)
    for k in range(0, a.shape[1], bk):
        out += a[:, k:k + bk].float() @ b[k:k + bk].float()
    return out.to(a.dtype)


class ToyFamily(GemmFamily):
    name, form = "toy", "toy_bk<k>"
    transferred = timed_online = True

    def __init__(self) -> None:
        self.calls = 0  # how often a kernel of the family ran (the tests count them)

    def owns(self, choice: str) -> bool:
        return choice.startswith("toy_")

    def parse(self, choice: str) -> int:
        bk = choice.removeprefix("toy_bk")
        if not bk.isdigit() or int(bk) not in SLICES:
            raise UsageError(f"{choice!r} is not a toy choice: {self.form} with k one of {SLICES}")
        return int(bk)

    def configs(self, problem: Problem, limit: int, variants: int = 0) -> list[str]:
        return [f"toy_bk{bk}" for bk in SLICES][:limit]

    def why_not(self, choice: str, shape: GemmShape, layout: str, device: str) -> str | None:
        bk = self.parse(choice)
        return f"K={shape.K} is not a multiple of {bk}" if shape.K % bk else None

    def build(self, choice: str, layout: str, a: torch.Tensor, b: torch.Tensor) -> GemmFn:
        bk = self.parse(choice)

        def run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return blocked_matmul(x, b_view(y, layout), bk)

        return run


FAMILY = ToyFamily()
