"""Decide whether candidate outputs match the reference: run in the parent, never in the child.

The reference is float64 (where the task's ops allow it). Errors are measured relative to
the reference's scale — relative L2 error ||out - ref|| / ||ref|| and the largest absolute
error divided by max|ref| — so a loose absolute tolerance can never let zeros or a broadcast
constant pass. Default tolerances follow the output dtype (docs/evaluation.md cites where
each number comes from); a task may override them, and each is widened to 4x the error of
the task's own program run in its native dtype (so fp32 cuDNN algorithms pass, TF32 does not).
Integer and boolean outputs must match exactly. NaN and Inf must sit where the reference has them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

# (relative L2, max error / max|ref|) per output dtype.
# fp32: true fp32 arithmetic lands near 1e-7..1e-6 relative, and as far as 1.08e-5 for an fp32
#   rewrite onto PyTorch's own SDPA kernels (CUDA-L1's KernelBench level3/31 on an H100, against
#   1.2e-6 for the task's program: the old 1e-5 refused it); TF32 (10-bit mantissa) lands near
#   3e-4 and bf16 near 3e-3 (measured on an H200; docs/evaluation.md), so 3e-5 rejects both by >=10x.
# fp16: output rounding alone is up to 2^-11 = 4.9e-4 per element; fp32-accumulated kernels
#   land near 1e-3 relative L2 -> 5e-3. bf16: 2^-8 = 3.9e-3 per element, and bf16 intermediates
#   (attention, norms) reach ~1e-2 -> 2e-2, as torchbench/BackendBench use 1e-2 for both.
DTYPE_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-9, 1e-8),
    torch.float32: (3e-5, 3e-4),
    torch.float16: (5e-3, 2e-2),
    torch.bfloat16: (2e-2, 6e-2),
}
TF32_TOLERANCE = (2e-3, 1e-2)  # opt-in: 10-bit mantissa products, fp32 accumulation
NATIVE_ERROR_FACTOR = 4.0


@dataclass(frozen=True)
class Tolerance:
    rel_l2: float
    max_rel: float
    exact: bool = False

    def to_dict(self) -> dict[str, float]:
        return {"rel_l2": self.rel_l2, "max_rel": self.max_rel, "exact": float(self.exact)}


@dataclass(frozen=True)
class Comparison:
    ok: bool
    reason: str
    max_abs_err: float = 0.0
    rel_l2_err: float = 0.0


def tolerance_for(dtype: torch.dtype, metadata: dict[str, Any], allow_tf32: bool,
                  native_errors: tuple[float, float] = (0.0, 0.0)) -> Tolerance:
    """The tolerance for one output: task override, else the dtype default, widened by native error."""
    if not (dtype.is_floating_point or dtype.is_complex):
        return Tolerance(0.0, 0.0, exact=True)
    rel_l2, max_rel = DTYPE_TOLERANCES.get(dtype, DTYPE_TOLERANCES[torch.float32])
    if dtype == torch.float32 and allow_tf32:  # the caller's: the config's or the task's opt-in, off in strict fp32
        rel_l2, max_rel = TF32_TOLERANCE
    rel_l2 = float(metadata.get("rtol", rel_l2))
    max_rel = float(metadata.get("atol", max_rel))
    # a non-finite native error (the program overflowing inside) widens nothing: KernelBench's
    # level1/90 cumprod once made the max-error bar infinite, and with it the timed sets' checks
    native_l2, native_max = (v if math.isfinite(v) else 0.0 for v in native_errors)
    return Tolerance(max(rel_l2, NATIVE_ERROR_FACTOR * native_l2), max(max_rel, NATIVE_ERROR_FACTOR * native_max))


# A task's own program this far from float64 (relative L2) computes a value that rounding dominates
DEGENERATE_NATIVE_ERROR = 1e-2


def native_error(native: torch.Tensor, exact: torch.Tensor) -> tuple[float, float]:
    """(rel_l2, max_rel) of the task's own program against float64, to calibrate the tolerance. Where
    the exact value is beyond the dtype's range and the program returned the same-signed infinity,
    that infinity is the correctly rounded answer (`overflowed`, as for a candidate), not an error of
    infinite size. A cumprod of x8 inputs had made the max error infinite and the rel-L2 NaN.
    Worked out piece by piece, as `compare` does: `overflowed` over a whole output of KernelBench's
    2025 sizes made a float64 copy of it, 16 GiB for level1/38's, and the reference process ran
    out of an H100's memory on it."""
    if not native.is_floating_point():
        return 0.0, 0.0
    tol = tolerance_for(native.dtype, {}, False)
    errors = _Errors()
    for o, r in _pieces(native, exact):
        errors.add(o, overflowed(r, o, tol))
    _, rel_l2, max_rel = errors.stats()
    return rel_l2, max_rel


def unfinite_note(native_errors: tuple[float, float], index: int, outputs: int) -> str | None:
    """A warning for an output whose native error is not finite even so: the task's own program
    overflows (or makes NaN) inside where float64 does not, so the tolerance is not widened by it
    and the program itself would fail the check on that draw."""
    if all(math.isfinite(v) for v in native_errors):
        return None
    label = "its output" if outputs == 1 else f"its output {index}"
    return (f"the task's own program is not finite in {label} on some draws where float64 is (it overflows "
            "inside); the tolerance is not widened by that draw, and the program itself would fail there")


THIN_MARGIN = 0.5


def thin_margin_note(rel_l2_err: float, tolerances: list[Tolerance]) -> str | None:
    """A warning for a correct single-output candidate whose worst relative L2 error is over
    THIN_MARGIN of the bar: it passed on these draws, and a lower-precision scheme passes like
    that (KernelBench level2/95's best, TF32 corrected by BF16 products, at 98.5 %; honest 3xTF32
    kernels of the same campaign sat at 1-25 %). A reader, or a reward, can weigh it."""
    if len(tolerances) != 1 or tolerances[0].exact or not tolerances[0].rel_l2 > 0:
        return None
    share = rel_l2_err / tolerances[0].rel_l2
    if not share > THIN_MARGIN:
        return None
    return (f"passes with a thin margin: its relative L2 error {rel_l2_err:.3g} is {share:.0%} of the tolerance "
            f"{tolerances[0].rel_l2:.3g}; a kernel this close may fail on other inputs (a lower-precision scheme?)")


def relative_change(a: torch.Tensor, b: torch.Tensor) -> float:
    """|b - a| / max(|a|, |b|) in L2, 0 for two zero tensors; different shapes, or a NaN or Inf in
    either, count as an infinite change (how far an output moves between input sets: the spread
    behind `insensitive_note`, and task_checks' test of the suite's tasks)."""
    if a.shape != b.shape:
        return math.inf
    scale = max(float(torch.linalg.vector_norm(a)), float(torch.linalg.vector_norm(b)))
    change = float(torch.linalg.vector_norm(b - a))
    if not (math.isfinite(change) and math.isfinite(scale)):
        return math.inf
    return change / scale if scale > 0 else 0.0


def insensitive_note(spread: float | None, tolerance: Tolerance, index: int, outputs: int) -> str | None:
    """A warning for an output whose float64 values hardly move across the draw's input sets (their
    `spread`, relative L2, is under the tolerance): one fixed tensor, an input-free program's, would
    pass every check. KernelBench's level3/24 (EfficientNetB2) moves by about 1e-13 against a
    1.6e-3 bar, so a speedup there says nothing unless a reader checks the kernel does the work."""
    if spread is None or tolerance.exact or not spread < tolerance.rel_l2:
        return None
    label = "its output" if outputs == 1 else f"its output {index}"
    return (f"input-insensitive task: {label} changes by only {spread:.2g} (relative L2) across input sets, "
            f"under the tolerance {tolerance.rel_l2:.3g}, so a program that ignores its inputs would pass; "
            "a correct verdict here does not show the work was done (read the kernel)")


def degenerate_note(native_rel_l2: float, index: int, outputs: int) -> str | None:
    """A warning for an output the task's own program gets wrong by more than DEGENERATE_NATIVE_ERROR
    (KernelBench's level2/41 is 7e8: a mean of group-normalised values, zero in exact arithmetic).
    The calibrated bar still holds a candidate to NATIVE_ERROR_FACTOR times the program's own
    deviation from float64 -- its rounding noise -- but any output within that noise passes, a
    constant one included, so a speedup on such a task says little."""
    if not native_rel_l2 > DEGENERATE_NATIVE_ERROR:
        return None
    label = "its output" if outputs == 1 else f"its output {index}"
    return (f"degenerate task: the task's own program misses float64 by a relative {native_rel_l2:.3g} in {label} "
            "(rounding dominates the value, e.g. one that is zero in exact arithmetic); any output within "
            f"{NATIVE_ERROR_FACTOR:g}x that deviation passes, so a speedup here says little")


def overflowed(ref: torch.Tensor, out: torch.Tensor, tol: Tolerance) -> torch.Tensor:
    """The float64 reference as the output dtype can hold it: where the exact value is beyond (or
    within the tolerance of) the dtype's largest finite number and the candidate returned an
    infinity of the same sign, the correctly rounded answer is that infinity (an fp16 GEMM whose
    exact result exceeds 65504 overflows in the task's own program too)."""
    if not out.is_floating_point() or out.dtype == torch.float64:
        return ref
    limit = torch.finfo(out.dtype).max * (1 - tol.max_rel)
    out64 = out.to(torch.float64)
    over = torch.isinf(out64) & torch.isfinite(ref) & (ref.abs() >= limit) & (out64.sign() == ref.sign())
    if not bool(over.any()):
        return ref
    return torch.where(over, out64, ref)


# Elements per piece when comparing: outputs of KernelBench's 2025 sizes hold 1.6e9 elements, and
# whole-tensor float64 temporaries of those (mask, copies, differences) took over 60 GB of host memory.
CHUNK = 1 << 24


def _pieces(out: torch.Tensor, ref: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(out, ref) in flat pieces of CHUNK elements, on the GPU when either is there: a big reference
    held in host memory is worked on piece by piece on the GPU (the same float64 arithmetic, far
    faster), and an output on the GPU never crosses to the host whole."""
    flat_out, flat_ref = out.reshape(-1), ref.reshape(-1)
    n = flat_ref.numel()
    work = (out.device if out.device.type == "cuda" else
            "cuda" if n > CHUNK and ref.device.type == "cpu" and torch.cuda.is_available() else ref.device)
    for start in range(0, n, CHUNK) if n else [0]:
        yield flat_out[start:start + CHUNK].to(work), flat_ref[start:start + CHUNK].to(work)


class _Errors:
    """Running error statistics over pieces, over the reference's finite positions, in float64."""

    def __init__(self) -> None:
        self.max_abs = self.diff_norm = self.ref_norm = self.scale = 0.0

    def add(self, out: torch.Tensor, ref: torch.Tensor) -> None:
        finite = torch.isfinite(ref)
        o = out.to(torch.float64)[finite]
        r = ref.to(torch.float64)[finite]
        if r.numel() == 0:
            return
        diff = o - r
        self.max_abs = max(self.max_abs, float(diff.abs().max()))
        self.diff_norm = math.hypot(self.diff_norm, float(torch.linalg.vector_norm(diff)))  # hypot: no overflow
        self.ref_norm = math.hypot(self.ref_norm, float(torch.linalg.vector_norm(r)))
        self.scale = max(self.scale, float(r.abs().max()))

    def stats(self) -> tuple[float, float, float]:
        ref_norm, diff_norm = self.ref_norm, self.diff_norm
        rel_l2 = diff_norm / ref_norm if ref_norm > 0 else diff_norm
        max_rel = self.max_abs / self.scale if self.scale > 0 else self.max_abs
        return self.max_abs, rel_l2, max_rel


def error_stats(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, float]:
    """(max_abs_err, rel_l2_err, max_abs_err / max|ref|) over the finite positions, in float64."""
    errors = _Errors()
    for o, r in _pieces(out, ref):
        errors.add(o, r)
    return errors.stats()


def compare(out: Any, ref: torch.Tensor, expected_dtype: torch.dtype, tol: Tolerance, label: str = "output") -> Comparison:
    """Compare one candidate output with its float64 reference (`expected_dtype` is the task's)."""
    if type(out) is not torch.Tensor:
        return Comparison(False, f"{label} is a {type(out).__name__}, not a plain torch.Tensor")
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, f"{label} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.dtype != expected_dtype:
        return Comparison(False, f"{label} has dtype {out.dtype}, expected {expected_dtype}")
    if tol.exact:
        wrong = sum(int((o != r.to(o.dtype)).sum()) for o, r in _pieces(out, ref))
        return Comparison(wrong == 0, f"{label} differs from the reference in {wrong} of {out.numel()} elements"
                          if wrong else "exact match", float(wrong > 0), float(wrong > 0))
    errors = _Errors()
    for o, r in _pieces(out, ref):
        r = overflowed(r, o, tol)
        nan_ok = torch.equal(torch.isnan(o), torch.isnan(r))
        inf_ok = torch.equal(torch.isinf(o), torch.isinf(r)) and torch.equal(
            o[torch.isinf(o)].sign().to(torch.float64), r[torch.isinf(r)].sign().to(torch.float64)) if nan_ok else False
        if not nan_ok or not inf_ok:
            bad = int((torch.isfinite(o) != torch.isfinite(r)).sum())
            kind = "NaN" if not nan_ok else "Inf"
            at_least = "at least " if o.numel() < out.numel() else ""  # counted in this piece
            return Comparison(False, f"{label} has {kind} values where the reference does not (or misses them): "
                              f"{at_least}{bad} elements", math.inf, math.inf)
        errors.add(o, r)
    max_abs, rel_l2, max_rel = errors.stats()
    if rel_l2 > tol.rel_l2:
        return Comparison(False, f"{label} has relative L2 error {rel_l2:.3g} > tolerance {tol.rel_l2:.3g}", max_abs, rel_l2)
    if max_rel > tol.max_rel:
        return Comparison(False, f"{label} has max error {max_abs:.3g} = {max_rel:.3g} of the output's scale > "
                          f"tolerance {tol.max_rel:.3g}", max_abs, rel_l2)
    return Comparison(True, "within tolerance", max_abs, rel_l2)


@dataclass(frozen=True)
class RefSummary:
    """What a timed call's fingerprint is checked against: computed once per reference output."""

    values: torch.Tensor
    norm: float
    scale: float


def reference_norm(ref: torch.Tensor) -> tuple[float, float]:
    """(L2 norm, max |value|) of a reference output over its finite positions, in float64: what
    the timed calls' fingerprints are held to. Worked out once per draw, where the output was
    computed (a big reference moved to host memory afterwards would otherwise cross back to the
    GPU whole for it, once per candidate that verifies)."""
    norm, scale = 0.0, 0.0
    for _, piece in _pieces(ref.reshape(-1)[:0], ref):  # (no output to compare: the reference alone)
        finite = piece.to(torch.float64)[torch.isfinite(piece)]
        if finite.numel():
            norm = math.hypot(norm, float(torch.linalg.vector_norm(finite)))
            scale = max(scale, float(finite.abs().max()))
    return norm, scale


def summarize_reference(ref: torch.Tensor, positions: torch.Tensor,
                        norm_scale: tuple[float, float] | None = None) -> RefSummary:
    """`norm_scale`: the output's `reference_norm`, when worked out already."""
    norm, scale = norm_scale if norm_scale is not None else reference_norm(ref)
    values = ref.reshape(-1)[positions.to(ref.device)].to(torch.float64).cpu()
    return RefSummary(values, norm, scale)


def compare_fingerprint(fp: dict[str, Any], ref: RefSummary, tol: Tolerance, dtype_max: float = math.inf) -> str | None:
    """Check a timed call's fingerprint against the reference; None when it matches, else why not.
    `dtype_max`: the output dtype's largest finite number (an overflow to Inf beyond it is right)."""
    try:
        norm = float(fp["norm"])
        values = torch.tensor([float(v) for v in fp["values"]], dtype=torch.float64)
    except (KeyError, TypeError, ValueError):
        return "a timed call returned no usable output"
    expected, ref_norm, scale = ref.values, ref.norm, ref.scale
    if values.shape != expected.shape:
        return "a timed call returned an output of the wrong size"
    if tol.exact:
        return None if torch.equal(values, expected) else "a timed call's output differs from the reference"
    big = values.isinf() & expected.isfinite() & (expected.abs() >= (1 - tol.max_rel) * dtype_max)
    expected = torch.where(big & (values.sign() == expected.sign()), values, expected)  # overflow, as in `overflowed`
    finite = torch.isfinite(expected)
    if not torch.equal(finite, torch.isfinite(values)):
        return "a timed call's output has NaN/Inf where the reference does not"
    worst = float((values[finite] - expected[finite]).abs().max()) if bool(finite.any()) else 0.0
    if worst > max(tol.max_rel * scale, 1e-30):
        return f"a timed call's output is wrong (error {worst:.3g} at sampled elements; scale {scale:.3g})"
    if math.isfinite(norm) and ref_norm > 0 and abs(norm - ref_norm) / ref_norm > max(4 * tol.rel_l2, 1e-12):
        return f"a timed call's output has norm {norm:.6g}, the reference {ref_norm:.6g}"
    return None
