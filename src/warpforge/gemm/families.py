"""The registry of GEMM families (family.py): every way warpforge can compute one GEMM, by name.

Adding a family is one module that defines a `GemmFamily` and one line in `REGISTERED`; the
dispatcher, the tuner, the benchmark and `gemm tune --families` then know it. The order is the
tuner's: baselines first (torch.matmul always first), then our families in the order their
configurations are screened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from warpforge.errors import UsageError
from warpforge.gemm import baselines, cublaslt, cuda_mma, cutlass_sm90, file_choice, triton_gemm
from warpforge.gemm.family import GemmFamily

if TYPE_CHECKING:
    import torch

    from warpforge.gemm.layout import GemmFn

REGISTERED: tuple[GemmFamily, ...] = (
    baselines.TORCH,
    baselines.PADDED,
    cublaslt.FAMILY,
    triton_gemm.FAMILY,
    cuda_mma.FAMILY,
    cutlass_sm90.FAMILY,
    file_choice.FAMILY,
)


def find(choice: str) -> GemmFamily | None:
    """The family that owns a choice name, or None."""
    return next((f for f in REGISTERED if f.owns(choice)), None)


def family_of(choice: str) -> GemmFamily:
    found = find(choice)
    if found is None:
        raise UsageError(f"unknown GEMM choice {choice!r}: expected {', '.join(f.form for f in REGISTERED)}")
    return found


def named(name: str) -> GemmFamily:
    """The family called `name` ("triton")."""
    found = next((f for f in REGISTERED if f.name == name), None)
    if found is None:
        raise UsageError(f"no GEMM family {name!r}: the families are {', '.join(f.name for f in REGISTERED)}")
    return found


def searched() -> list[str]:
    """The names `gemm tune --families` takes: our families that list configurations of their own."""
    return [f.name for f in REGISTERED if f.ours and f.searched]


def make(choice: str, layout: str, a: torch.Tensor, b: torch.Tensor) -> GemmFn:
    """The function that runs `choice` on operands like `a` and `b` (see GemmFamily.build)."""
    return family_of(choice).build(choice, layout, a, b)


def forget() -> None:
    """Every family drops what it keeps per problem (cuBLASLt's plans with their operands)."""
    for family in REGISTERED:
        family.forget()
