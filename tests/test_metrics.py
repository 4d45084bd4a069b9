import itertools
import math

from warpforge import metrics

import pytest

from warpforge.metrics import (
    PEAKS,
    fast_p,
    geometric_mean,
    pass_at_k,
    peak_flops_for_dtype,
    peaks_for,
    roofline_fraction,
    roofline_ms,
    speedup,
    speedup_at_k,
    summarize,
)


def test_speedup():
    assert speedup(10.0, 2.5) == 4.0
    assert speedup(1.0, 2.0) == 0.5
    for ref, cand in [(0, 1), (1, 0), (-1, 1), (1, -2)]:
        with pytest.raises(ValueError):
            speedup(ref, cand)


def test_geometric_mean():
    assert geometric_mean([1, 4]) == pytest.approx(2.0)
    assert geometric_mean(iter([2, 8, 4])) == pytest.approx(4.0)
    assert geometric_mean([3.0]) == pytest.approx(3.0)
    for bad in ([], [1.0, 0.0], [2.0, -1.0]):
        with pytest.raises(ValueError):
            geometric_mean(bad)


def test_fast_p_counts():
    results = [(True, 2.5), (True, 1.5), (True, 0.8), (False, 3.0), (True, None)]
    assert fast_p(results, 0.0) == pytest.approx(3 / 5)
    assert fast_p(results, 1.0) == pytest.approx(2 / 5)
    assert fast_p(results, 2.0) == pytest.approx(1 / 5)
    assert fast_p(results, 2.5) == 0.0  # strictly greater than p
    with pytest.raises(ValueError):
        fast_p([], 1.0)


def test_pass_at_k_known_values():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(5, 3, 3) == 1.0  # fewer than k failures: every k-subset has a pass
    assert pass_at_k(200, 1, 200) == 1.0


def _brute_pass_at_k(n, c, k):
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_matches_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_large_n_is_stable():
    value = pass_at_k(2000, 7, 100)
    exact = 1 - math.comb(1993, 100) / math.comb(2000, 100)
    assert value == pytest.approx(exact, rel=1e-12)
    assert 0.0 < value < 1.0


@pytest.mark.parametrize("n, c, k", [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6), (0, 0, 1)])
def test_pass_at_k_validation(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def _brute_speedup_at_k(speedups, k, floor=0.0):
    vals = [floor if s is None else s for s in speedups]
    subsets = list(itertools.combinations(vals, k))
    return sum(max(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(
    "speedups",
    [
        [1.5],
        [None, 2.0],
        [0.5, None, 3.0, 1.2, None],
        [2.0, 2.0, None, 0.9, 4.5, 1.1, None],
        [None, None, None],
    ],
)
@pytest.mark.parametrize("floor", [0.0, 1.0])
def test_speedup_at_k_matches_enumeration(speedups, floor):
    for k in range(1, len(speedups) + 1):
        got = speedup_at_k(speedups, k, floor=floor)
        assert got == pytest.approx(_brute_speedup_at_k(speedups, k, floor), abs=1e-12)


def test_speedup_at_k_edges():
    vals = [0.5, None, 3.0, 1.2]
    assert speedup_at_k(vals, 1) == pytest.approx((0.5 + 0 + 3.0 + 1.2) / 4)
    assert speedup_at_k(vals, 4) == 3.0
    assert speedup_at_k([None, None], 2, floor=1.0) == 1.0
    for k in (0, 5):
        with pytest.raises(ValueError):
            speedup_at_k(vals, k)
    with pytest.raises(ValueError):
        speedup_at_k([], 1)


def test_roofline_ms():
    # 1 TFLOP at 1 PFLOP/s = 1 ms; 1 GB at 1 TB/s = 1 ms; 2 GB = 2 ms dominates.
    assert roofline_ms(1e12, 2e9, 1e15, 1e12) == pytest.approx(2.0)
    assert roofline_ms(4e12, 2e9, 1e15, 1e12) == pytest.approx(4.0)
    assert roofline_ms(1e12, None, 1e15, 1e12) == pytest.approx(1.0)
    assert roofline_ms(None, 3.35e9, None, 3.35e12) == pytest.approx(1.0)
    assert roofline_ms(1e12, 2e9, None, 1e12) == pytest.approx(2.0)  # compute peak unknown
    assert roofline_ms(None, None, 1e15, 1e12) is None
    assert roofline_ms(1e12, 1e9, None, None) is None


def test_roofline_fraction():
    assert roofline_fraction(4.0, 1.0) == 0.25
    assert roofline_fraction(1.0, 1.0) == 1.0
    assert roofline_fraction(2.0, None) is None
    with pytest.raises(ValueError):
        roofline_fraction(0.0, 1.0)


def test_peaks_for_name_matching():
    sxm = peaks_for("NVIDIA H100 80GB HBM3")
    pcie = peaks_for("NVIDIA H100 PCIe")
    h200 = peaks_for("NVIDIA H200")
    a100 = peaks_for("NVIDIA A100-SXM4-80GB")
    assert sxm == PEAKS["H100 SXM"]
    assert sxm["bytes_per_s"] == 3.35e12 and sxm["fp32_flops"] == 67e12
    assert pcie["bytes_per_s"] == 2.0e12 and pcie["fp16_flops"] == 756e12
    assert h200["bytes_per_s"] == 4.8e12 and h200["bf16_flops"] == sxm["bf16_flops"]
    assert a100["tf32_flops"] == 156e12
    assert peaks_for("nvidia h100 pcie") == pcie  # case-insensitive
    assert peaks_for("NVIDIA GeForce RTX 4090") is None


def test_peaks_for_returns_a_copy():
    peaks_for("NVIDIA H100 80GB HBM3")["fp32_flops"] = 1.0
    assert PEAKS["H100 SXM"]["fp32_flops"] == 67e12


def test_peak_flops_for_dtype():
    p = peaks_for("NVIDIA H100 80GB HBM3")
    assert peak_flops_for_dtype(p, "float32") == 67e12
    assert peak_flops_for_dtype(p, "float32", allow_tf32=True) == 494.7e12
    assert peak_flops_for_dtype(p, "float16") == 989.4e12
    assert peak_flops_for_dtype(p, "torch.bfloat16") == 989.4e12
    assert peak_flops_for_dtype(p, "float64") == 34e12
    with pytest.raises(ValueError):
        peak_flops_for_dtype(p, "int8")


def test_summarize():
    results = [
        {"correct": True, "speedup": 1.0},
        {"correct": True, "speedup": 4.0},
        {"correct": True, "speedup": None},
        {"correct": False, "speedup": 9.0},
    ]
    s = summarize(results)
    assert s["n"] == 4 and s["n_correct"] == 3
    assert s["correct_rate"] == 0.75
    assert s["geomean_speedup"] == pytest.approx(2.0)
    assert s["fast_0"] == 0.5 and s["fast_1"] == 0.25 and s["fast_2"] == 0.25


def test_summarize_no_correct_timed():
    s = summarize([{"correct": False, "speedup": None}])
    assert s["geomean_speedup"] is None and s["n_correct"] == 0 and s["fast_0"] == 0.0
    with pytest.raises(ValueError):
        summarize([])


def test_the_impossible_speed_limit_of_an_fp32_task_is_the_tf32_rate() -> None:
    """PyTorch's defaults run fp32 convolutions on TF32 tensor cores, so an honest fp32 conv can
    beat the fp32-core roofline; the impossible-speed check uses the TF32 rate (H100 A/A: 1.52x)."""
    import torch

    from warpforge.candidate import Timing
    from warpforge.config import EvalConfig
    from warpforge.evaluate.protocol import Loaded
    from warpforge.evaluate.verdict import Reference, _roofline

    flops = 2 * 32 * 128 * 128 * 128 * 64 * 9  # about conv2d's
    ref = Reference([1], 1, [torch.float32], [], Loaded(flops, 1e6, {"gpu": "NVIDIA H100 80GB HBM3"}),
                    {}, [], 0.0, 1)
    timing = Timing(median_ms=0.75, iqr_ms=0, min_ms=0.75, mean_ms=0.75, n=1, host_median_ms=1)
    info = _roofline(ref, timing, EvalConfig(device="cpu"))
    assert info == {"flops": flops, "bytes": 1e6}  # no GPU peaks on the CPU
    info = _roofline(ref, timing, EvalConfig(device="cpu").replace(device="cuda"))
    assert info["fraction"] > 1.0  # faster than the fp32-core floor, as cuDNN's TF32 is
    assert info["impossible_below_ms"] < info["floor_ms"] / 5
    assert metrics.roofline_fraction(0.75, info["impossible_below_ms"]) < 1.0
