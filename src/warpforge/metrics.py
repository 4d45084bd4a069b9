"""Summary numbers for evaluations: speedups, geometric means, KernelBench's fast_p,
pass@k and speedup@k estimators, and roofline (speed-of-light) times from datasheet peaks.

It does not measure anything, run kernels, or count a kernel's FLOPs or bytes: callers
supply timings and work counts. Pure Python (math only).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence


def speedup(reference_ms: float, candidate_ms: float) -> float:
    """Reference time over candidate time (> 1 means the candidate is faster)."""
    if not (reference_ms > 0 and candidate_ms > 0):
        raise ValueError(f"times must be positive, got {reference_ms!r} and {candidate_ms!r}")
    return reference_ms / candidate_ms


def faster_beyond_noise(fast_ms: float, fast_iqr_ms: float, slow_ms: float, slow_iqr_ms: float) -> bool:
    """`fast` is faster than `slow` by more than the measured spread: their interquartile ranges,
    centred on the medians, do not overlap ((slow - fast) > (iqr_fast + iqr_slow) / 2). The one
    acceptance rule of the search and of the preference-pair export."""
    return slow_ms - fast_ms > (fast_iqr_ms + slow_iqr_ms) / 2


PAIRED_COVERAGE = 0.90
"""The confidence of a paired speedup's interval (order statistics of the rounds' ratios)."""


def paired_speedup(reference_ms: list[float], candidate_ms: list[float]) -> tuple[float, tuple[float, float]]:
    """The speedup from rounds in which the reference and the candidate were timed back to back:
    the median of the per-round ratios reference/candidate, and a distribution-free interval for
    it — the k-th smallest and k-th largest ratio, with the largest k whose coverage of the median
    is at least PAIRED_COVERAGE (each ratio falls either side of the true median with probability
    1/2: coverage = 1 - 2 P(Binomial(n, 1/2) < k)). Five rounds give [min, max] at 93.75 %."""
    ratios = sorted(r / c for r, c in zip(reference_ms, candidate_ms) if c > 0 and r > 0)
    if not ratios:
        raise ValueError("paired_speedup of no rounds")
    n, k = len(ratios), 1
    while k + 1 <= (n + 1) // 2 and interval_coverage(k + 1, n) >= PAIRED_COVERAGE:
        k += 1
    return statistics.median(ratios), (ratios[k - 1], ratios[n - k])


def interval_coverage(k: int, n: int) -> float:
    """The chance that the k-th smallest and k-th largest of n samples enclose their median:
    1 - 2 P(fewer than k of the n fall below it), each falling below with probability 1/2."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n


def geometric_mean(values: Iterable[float]) -> float:
    """exp(mean(log v)); the right mean for ratios such as speedups (Fleming & Wallace 1986)."""
    vals = list(values)
    if not vals:
        raise ValueError("geometric_mean of no values")
    if any(not v > 0 for v in vals):
        raise ValueError("geometric_mean needs positive values")
    return math.exp(math.fsum(math.log(v) for v in vals) / len(vals))


def fast_p(results: Sequence[tuple[bool, float | None]], p: float) -> float:
    """KernelBench's fast_p (Ouyang et al. 2025): fraction of all results that are correct
    and have speedup > p. Incorrect or untimed (None) results count as not fast."""
    if not results:
        raise ValueError("fast_p of no results")
    fast = sum(1 for ok, s in results if ok and s is not None and s > p)
    return fast / len(results)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. 2021 (HumanEval), 1 - C(n-c, k)/C(n, k), in the
    paper's numerically stable product form: 1 - prod_{i=n-c+1}^{n} (1 - k/i)."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def speedup_at_k(speedups: Sequence[float | None], k: int, floor: float = 0.0) -> float:
    """Expected best speedup among k of the n samples drawn without replacement.

    Incorrect samples (None) count as `floor`, by default 0.0 ("no usable kernel"; pass 1.0
    to count them as falling back to the reference). Unbiased estimator in the manner of
    Chen et al. 2021: with values sorted ascending v_(1..n),
    E[max of a k-subset] = sum_i v_(i) * C(i-1, k-1) / C(n, k).
    """
    n = len(speedups)
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    vals = sorted(floor if s is None else s for s in speedups)
    total = math.comb(n, k)
    # Exact integer weights; int / int division is correctly rounded even for huge values.
    return math.fsum(v * (math.comb(i - 1, k - 1) / total) for i, v in enumerate(vals, 1))


def roofline_ms(
    flops: float | None,
    bytes_moved: float | None,
    peak_flops: float | None,
    peak_bytes_per_s: float | None,
) -> float | None:
    """Speed-of-light time in ms, max(flops/peak_flops, bytes/peak_bw) (Williams et al. 2009,
    "Roofline"), using only the terms whose count and peak are both known; None if neither."""
    terms = []
    if flops is not None and peak_flops:
        terms.append(flops / peak_flops)
    if bytes_moved is not None and peak_bytes_per_s:
        terms.append(bytes_moved / peak_bytes_per_s)
    return max(terms) * 1e3 if terms else None


def roofline_fraction(measured_ms: float, floor_ms: float | None) -> float | None:
    """floor_ms / measured_ms: 1.0 means running at the speed of light; None if no floor."""
    if floor_ms is None:
        return None
    if not measured_ms > 0:
        raise ValueError(f"measured time must be positive, got {measured_ms!r}")
    return floor_ms / measured_ms


# Peak rates from the NVIDIA datasheets (H100, H200, A100 80GB SXM); FLOP/s and bytes/s.
# Tensor-core figures are dense (without structured sparsity). fp64 is the non-tensor-core
# rate, since ordinary kernels do not use fp64 tensor cores.
_H100_SXM = {
    "fp64_flops": 34e12,
    "fp32_flops": 67e12,
    "tf32_flops": 494.7e12,
    "fp16_flops": 989.4e12,
    "bf16_flops": 989.4e12,
    "bytes_per_s": 3.35e12,
}
PEAKS: dict[str, dict[str, float]] = {
    "H100 SXM": _H100_SXM,
    "H100 80GB HBM3": _H100_SXM,
    "H100 PCIe": {
        "fp64_flops": 26e12,
        "fp32_flops": 51e12,
        "tf32_flops": 378e12,
        "fp16_flops": 756e12,
        "bf16_flops": 756e12,
        "bytes_per_s": 2.0e12,
    },
    "H200": {**_H100_SXM, "bytes_per_s": 4.8e12},
    "A100": {
        "fp64_flops": 9.7e12,
        "fp32_flops": 19.5e12,
        "tf32_flops": 156e12,
        "fp16_flops": 312e12,
        "bf16_flops": 312e12,
        "bytes_per_s": 2.039e12,
    },
}


def peaks_for(gpu_name: str) -> dict[str, float] | None:
    """The PEAKS entry whose key is the longest case-insensitive substring of gpu_name."""
    name = gpu_name.lower()
    hits = [key for key in PEAKS if key.lower() in name]
    return dict(PEAKS[max(hits, key=len)]) if hits else None


def peak_flops_for_dtype(peaks: dict, dtype: str, allow_tf32: bool = False) -> float:
    """Peak FLOP/s for a dtype name ("float32", "torch.bfloat16", ...): float32 uses the
    fp32 rate (tf32 tensor cores if allow_tf32), float16/bfloat16 the tensor-core rate."""
    d = dtype.removeprefix("torch.")
    keys = {
        "float64": "fp64_flops",
        "float32": "tf32_flops" if allow_tf32 else "fp32_flops",
        "float16": "fp16_flops",
        "bfloat16": "bf16_flops",
    }
    if d not in keys:
        raise ValueError(f"no peak for dtype {dtype!r}")
    return peaks[keys[d]]


def summarize(results: Sequence[dict]) -> dict:
    """Summary of `warpforge eval --json` objects (keys "correct", "speedup")."""
    if not results:
        raise ValueError("summarize of no results")
    pairs = [(bool(r.get("correct")), r.get("speedup")) for r in results]
    timed = [s for ok, s in pairs if ok and s is not None and s > 0]
    n_correct = sum(ok for ok, _ in pairs)
    return {
        "n": len(pairs),
        "n_correct": n_correct,
        "correct_rate": n_correct / len(pairs),
        "geomean_speedup": geometric_mean(timed) if timed else None,
        "fast_0": fast_p(pairs, 0.0),
        "fast_1": fast_p(pairs, 1.0),
        "fast_2": fast_p(pairs, 2.0),
    }
