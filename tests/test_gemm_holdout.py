"""benchmarks/gemm_holdout.py: choice rules for shapes the tuner never measured, on synthetic records."""

from __future__ import annotations

import math
from typing import Any


def _shape(m: int, n: int, k: int) -> dict[str, Any]:
    """A wins (0.8x torch's time) where M >= 1024, loses (1.25x) below; B is always 1.1x."""
    a = 0.8 if m >= 1024 else 1.25
    times = {"torch": 1.0, "triton_tiled:A": a, "triton_tiled:B": 1.1}
    best = min(("triton_tiled:A", "triton_tiled:B"), key=times.get)
    return {"shape": (m, n, k), "layout": "nn", "dtype": "float16", "choice": best if times[best] < 1 else "torch",
            "torch": 1.0, "times": times, "best_portable": best, "best_portable+lt": best}


def test_the_regression_and_the_votes_pick_from_other_shapes_only(bench_script: Any) -> None:
    h = bench_script("gemm_holdout")
    grid = [_shape(m, n, k) for m in (64, 128, 256, 512, 1024, 2048, 4096, 8192) for n in (256, 1024, 4096)
            for k in (256, 2048)]
    big, small = _shape(3072, 2048, 1024), _shape(96, 2048, 1024)
    assert h.pick("model", big, grid) == "triton_tiled:A"
    assert h.pick("model", small, grid) == "torch"
    assert h.pick("knn-5", big, grid) == "triton_tiled:A" and h.pick("knn-5", small, grid) == "torch"
    assert h.score(big, "triton_tiled:A") == 1.25 and h.score(small, "torch") == 1.0
    # a configuration H would not screen is not proposed by the regression
    unscreened = dict(big, times={"torch": 1.0, "triton_tiled:B": 1.1})
    assert h.pick("model", unscreened, grid) == "torch"
    assert math.isclose(h.distance((64, 64, 64), (128, 64, 64)), math.log(2))


def test_the_dispatcher_rule_hands_on_what_the_dispatcher_does(bench_script: Any) -> None:
    """`dispatcher` mirrors dispatch.TRANSFERRED (no CUTLASS since 2026-11-27); `dispatcher+cutlass`
    is the rule before it. Both look at the nearest shape within 2x only."""
    h = bench_script("gemm_holdout")
    near = dict(_shape(1024, 1024, 1024), choice="cutlass_128x128x64_c1x1_coop")
    far = dict(_shape(4096, 4096, 4096), choice="triton_tiled:A")
    target = dict(_shape(1536, 1024, 1024), times={"torch": 1.0, "cutlass_128x128x64_c1x1_coop": 0.9})
    assert h.pick("dispatcher", target, [near, far]) == "torch"
    assert h.pick("dispatcher+cutlass", target, [near, far]) == "cutlass_128x128x64_c1x1_coop"
    assert h.pick("dispatcher", target, [dict(near, choice="triton_tiled:B"), far]) == "triton_tiled:B"
    assert h.pick("dispatcher", target, [far]) == "torch"  # over 2x away in M, N and K
