"""The per-shape GEMM track (issue 4): shape sets, baselines and our kernel families (choices.py,
triton_gemm.py, cuda_mma.py), the tuner (tune.py), the dispatcher (dispatch.py: `matmul` and
`torch.ops.warpforge.matmul`), the benchmark (bench.py) and its plots (plots.py). The names
below load their modules on first use (`_lazy.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from warpforge._lazy import attributes

if TYPE_CHECKING:
    from warpforge.gemm.dispatch import matmul
    from warpforge.gemm.shapes import GemmShape, load_shapes, shape_set

__getattr__ = attributes(__name__, {"matmul": "warpforge.gemm.dispatch", "GemmShape": "warpforge.gemm.shapes",
                                    "load_shapes": "warpforge.gemm.shapes", "shape_set": "warpforge.gemm.shapes"})

__all__ = ["GemmShape", "load_shapes", "matmul", "shape_set"]
