"""One interface for every way warpforge computes a GEMM: a *family* owns a set of choice names.

A family parses its choice names (`owns`, `parse`), lists the configurations worth timing for a
shape (`configs`), says why one cannot run a shape on a device (`why_not`), and builds one into the
function that runs it (`build`: compiled, loaded or planned once; the function is the run). The
hooks below the required methods have defaults that suit most families. families.py lists them;
the dispatcher, the tuner and the benchmark reach kernels only through it and this interface.
Timing, verification and the choice per shape are the tuner's, not a family's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from warpforge.gemm.layout import GemmFn
    from warpforge.gemm.shapes import GemmShape


@dataclass(frozen=True)
class Problem:
    """One GEMM to choose a kernel for: a shape, the layout of b, the device ("cuda" or "cpu")."""

    shape: GemmShape
    layout: str
    device: str
    operands: tuple[torch.Tensor, torch.Tensor] | None = None
    """Example operands of the problem, for families that plan on real tensors (cuBLASLt)."""

    @property
    def sms(self) -> int:
        """Streaming multiprocessors of the device (see `num_sms`)."""
        import torch

        return num_sms(torch.device(self.device))


_num_sms: dict[int, int] = {}


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device; 4 on the CPU, where Triton's interpreter needs only
    a few programs to exercise the persistent loops."""
    if device.type != "cuda":
        return 4
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _num_sms:
        _num_sms[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _num_sms[index]


class GemmFamily(ABC):
    """A kind of GEMM kernel and its configurations, each named by one choice string."""

    name: str
    """What `gemm tune --families` and the tuning records call it ("triton")."""
    form: str
    """Its choice names, for messages ("triton_<family>:<params>")."""
    ours: bool = True
    """One of our kernels (the tuner keeps it only when it beats the best baseline beyond noise),
    or a baseline (torch.matmul, padding, cuBLASLt)."""
    searched: bool = True
    """The tuner lists configurations of it when `--families` names it (a candidate file has none of its own)."""
    transferred: bool = False
    """A shape the table has not measured may take this family's choice from the nearest measured one."""
    timed_online: bool = False
    """Tuning on first use times the nearest measured shape's choice of this family on the new shape."""
    capturable: bool = True
    """Its kernels can be made and run while a CUDA graph is being captured (cuBLASLt's cannot)."""

    @abstractmethod
    def owns(self, choice: str) -> bool:
        """Whether `choice` is one of this family's names (it may still be malformed: see `parse`)."""

    @abstractmethod
    def parse(self, choice: str) -> Any:
        """The configuration `choice` names; UsageError saying what a name of this family looks like."""

    @abstractmethod
    def configs(self, problem: Problem, limit: int, variants: int = 0) -> list[str]:
        """The choices worth timing for `problem`, at most about `limit` (and `variants` run-time
        variants of each where the family has them up front, as cuBLASLt's reconfigurations); none
        that `why_not` refuses."""

    @abstractmethod
    def why_not(self, choice: str, shape: GemmShape, layout: str, device: str) -> str | None:
        """One line saying why `choice` cannot compute `shape` in `layout` on `device`, or None if it can."""

    @abstractmethod
    def build(self, choice: str, layout: str, a: torch.Tensor, b: torch.Tensor) -> GemmFn:
        """The function that runs `choice` on operands like `a` and `b` (their shapes, dtype and
        device fix the problem), compiled, loaded or planned now; UsageError when it cannot be made
        here (a missing toolchain, another GPU)."""

    def ready(self, choice: str, dtype: str, layout: str) -> bool:
        """Whether `build` can make `choice` without a long compile that a matmul call should not start unasked."""
        return True

    def prebuild(self, choices: list[str], dtype: str, layout: str) -> None:
        """Compile ahead, in parallel, what `build` would compile one at a time; failures show in `build`."""

    def variants(self, ranked: list[str], problem: Problem, count: int) -> list[str]:
        """More choices to time after a first screen: run-time settings of the `count` fastest of this
        family's screened choices (`ranked`, fastest first)."""
        return []

    def describe(self, problem: Problem, choices: list[str]) -> dict[str, Any]:
        """What a tuning record keeps about this family's `choices` on `problem`, beside their timings."""
        return {}

    def table_entry(self, choice: str, record: dict[str, Any]) -> dict[str, Any]:
        """Fields the dispatcher's table keeps beside `choice`, from the tuning record that chose it."""
        return {}

    def forget(self) -> None:
        """Drop what `build` keeps per problem (plans, operands, workspaces)."""
