"""A candidate kernel file as a GEMM choice, `file:<path>`: its `ModelNew()` called as forward(a, b),
with b in the task's layout (e.g. the best kernel of `warpforge optimize` on a task from `warpforge
gemm task`). It runs in this process, not in a sandbox (the tuner verifies it like every choice),
so name only files you trust, such as ones the sandboxed evaluator already accepted."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from warpforge.errors import UsageError
from warpforge.gemm.family import GemmFamily, Problem
from warpforge.gemm.layout import GemmFn

if TYPE_CHECKING:
    import torch

    from warpforge.gemm.shapes import GemmShape

PREFIX = "file:"

_candidates: dict[tuple[str, str], GemmFn] = {}


def choice_for(path: str | Path) -> str:
    """The choice name of a candidate file (its absolute path)."""
    return f"{PREFIX}{Path(path).resolve()}"


def candidate_choice(path: str, device: torch.device) -> GemmFn:
    """The file's `ModelNew()` on `device`, imported once per file and device."""
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


class FileFamily(GemmFamily):
    """Candidate files: none of its own to list (the tuner takes them from `--candidate`); handed on
    to the nearest unmeasured shapes like our Triton and mma kernels."""

    name, form = "file", "file:<candidate.py>"
    searched = False
    transferred = True

    def owns(self, choice: str) -> bool:
        return choice.startswith(PREFIX)

    def parse(self, choice: str) -> str:
        if not self.owns(choice) or not choice[len(PREFIX):]:
            raise UsageError(f"{choice!r} is not a candidate file choice: {self.form}")
        return choice[len(PREFIX):]

    def configs(self, problem: Problem, limit: int, variants: int = 0) -> list[str]:
        return []

    def why_not(self, choice: str, shape: GemmShape, layout: str, device: str) -> str | None:
        path = self.parse(choice)
        return None if Path(path).is_file() else f"candidate kernel {path} does not exist"

    def build(self, choice: str, layout: str, a: torch.Tensor, b: torch.Tensor) -> GemmFn:
        return candidate_choice(self.parse(choice), a.device)


FAMILY = FileFamily()
