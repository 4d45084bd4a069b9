"""The per-shape GEMM track (issue 4): shape sets first; baselines, kernel families, the tuner and
the dispatcher build on them."""

from warpforge.gemm.shapes import GemmShape, load_shapes, shape_set

__all__ = ["GemmShape", "load_shapes", "shape_set"]
