"""benchmarks/gemm_tune_summary.py: where each kernel family wins, by the shape's class."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _record(torch_ms: float, choice: str, **family_ms: float) -> dict[str, Any]:
    candidates = [{"name": name.replace("__", ":"), "status": "ok", "screen": {"ms": ms}} for name, ms in family_ms.items()]
    candidates.append({"name": "cutlass_128x128x64_c1x1_coop", "status": "error", "error": "wrong"})  # not timed
    return {"baselines": {"torch": {"ms": torch_ms}}, "candidates": candidates, "choice": choice}


def test_families_are_scored_per_shape_class(bench_script: Any) -> None:
    s = bench_script("gemm_tune_summary")
    records = [
        # latency-bound: CUTLASS wins one of two; the failed configuration counts nowhere
        _record(0.008, "cutlass_64x128x64_c1x1_pingpong", cutlass_64x128x64_c1x1_pingpong=0.007, triton_tiled__a=0.009),
        _record(0.005, "torch", cutlass_64x128x64_c1x1_pingpong=0.006, triton_tiled__a=0.005),
        # a large shape: cuBLASLt wins, Triton is 1.005x (under the 1.01x that counts as a win)
        _record(0.400, "cublaslt:2", cublaslt__2=0.360, triton_tiled__a=0.398),
    ]
    rows = {(r["class"], r["family"]): r for r in s.by_class(records)}
    small = rows[("under 10 µs", "cutlass")]
    assert (small["shapes"], small["timed"], small["wins"], small["chosen"]) == (2, 2, 1, 1)
    assert abs(small["geomean"] - ((0.008 / 0.007) * (0.005 / 0.006)) ** 0.5) < 1e-9
    assert rows[("under 10 µs", "triton_tiled")]["wins"] == 0
    big_lt, big_triton = rows[("50 µs and over", "cublaslt")], rows[("50 µs and over", "triton_tiled")]
    assert (big_lt["wins"], big_lt["chosen"], big_triton["wins"]) == (1, 1, 0)
    assert ("10-50 µs", "cutlass") not in rows  # no shape of that class
    table = s.class_markdown(s.by_class(records))
    assert "| under 10 µs (2) | cutlass | 2 | 1 | 1 |" in table


def test_the_held_out_shapes_are_off_the_grid_aligned_and_as_committed(tmp_path: Path, bench_script: Any) -> None:
    """benchmarks/gemm_heldout_shapes.py: the committed file is what the fixed seed draws, every
    shape is a multiple of 64 within the grid's range, and none is a grid point."""
    held = bench_script("gemm_heldout_shapes")
    from warpforge.gemm.shapes import CUDAL2_DIMS, load_shapes

    first = [(s.M, s.N, s.K) for s in load_shapes(ROOT / "benchmarks" / "gemm_heldout_cudal2.csv")]
    second = [(s.M, s.N, s.K) for s in load_shapes(ROOT / "benchmarks" / "gemm_heldout2_cudal2.csv")]
    assert first == held.draw(len(first)) and len(first) == len(set(first)) == 96
    assert second == held.draw(96, seed=24) and len(set(second)) == 96 and not set(first) & set(second)
    for dims in first + second:
        assert all(d % 64 == 0 and 64 <= d <= 16384 for d in dims), dims
        assert not all(d in CUDAL2_DIMS for d in dims), dims
    assert held.draw(5, seed=1) != held.draw(5, seed=2)
