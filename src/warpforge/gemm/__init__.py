"""The per-shape GEMM track (issue 4): shape sets, baselines and our kernel families (choices.py,
triton_gemm.py, cuda_mma.py), the tuner (tune.py), the dispatcher (dispatch.py: `matmul` and
`torch.ops.warpforge.matmul`), the benchmark (bench.py) and its plots (plots.py)."""

from warpforge.gemm.dispatch import matmul
from warpforge.gemm.shapes import GemmShape, load_shapes, shape_set

__all__ = ["GemmShape", "load_shapes", "matmul", "shape_set"]
