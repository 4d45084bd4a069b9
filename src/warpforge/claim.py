"""THE claim rule: what one evaluation may say about a candidate's speed, and how to say it.

A correct, timed result always keeps its point estimate (reference time over candidate time) and
an interval around it. The claim is decided by where that interval lies, never by how wide it
is: *faster* when its lower end is above 1, *slower* when its upper end is below 1, *within
noise* otherwise — so a wide interval entirely above 1 ([86, 218]) is a proven win. Paired
timing gives the interval (evaluate/verdict.py: the rounds' ratios, widened by the process
spread); a result timed without rounds (paired timing off, or recorded before it existed) gets
the one its two interquartile ranges allow, which is exactly the old "IQRs do not overlap" rule.

Every view decides and words a claim here: `warpforge eval`, the demo, eval-batch, calibrate,
the loop's live table and exit code, `archive ls/show/best`, the report, the exports, MCP and
the reward (docs/timing.md, "How a speedup is decided"). It reads result dictionaries
(`EvalResult.to_dict`, the archive's stored `result`), so rows recorded under an older rule are
re-read under this one. It measures nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["faster", "slower", "within_noise", "not_timed"]


@dataclass(frozen=True)
class Claim:
    verdict: Verdict
    speedup: float | None = None
    """Reference time over candidate time (the paired rounds' median ratio when paired)."""
    low: float | None = None
    high: float | None = None
    paired: bool = False
    """The interval comes from paired rounds (else from the two timings' interquartile ranges)."""
    why_not: str = ""
    """For `not_timed`: why there is no speedup, in a few words (`--no-bench`, `incorrect` ...)."""

    @property
    def faster(self) -> bool:
        """A proven win: the whole interval lies above 1."""
        return self.verdict == "faster"

    @property
    def timed(self) -> bool:
        return self.verdict != "not_timed"

    @property
    def rank(self) -> tuple[bool, float, float]:
        """Sort key of bests: proven wins first, then the interval's lower end, then the estimate."""
        return (self.faster, self.low or 0.0, self.speedup or 0.0)

    def words(self) -> str:
        """What a person reads: `143x faster [86-218]`, `1.26x, within noise [0.79-1.85]`,
        `0.52x, slower [0.4-0.61]`, `not timed (--no-bench)`."""
        if self.verdict == "not_timed" or self.speedup is None:
            return f"not timed ({self.why_not or 'no timing recorded'})"
        interval = f" [{_num(self.low)}-{_num(self.high)}]" if self.low is not None else ""
        if self.verdict == "faster":
            return f"{_num(self.speedup)}x faster{interval}"
        label = "slower" if self.verdict == "slower" else "within noise"
        return f"{_num(self.speedup)}x, {label}{interval}"

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "speedup": self.speedup, "interval": _interval(self.low, self.high),
                "paired": self.paired, "words": self.words()}


def claim_of(result: Mapping[str, Any] | None) -> Claim:
    """The claim of one evaluation, from its result dictionary (`EvalResult.to_dict`, or the
    archive's stored `result`; missing keys of old or foreign rows read as absent)."""
    r = result or {}
    status = str(r.get("status") or "not evaluated")
    if status != "correct":
        return Claim("not_timed", why_not=status)
    paired = r.get("paired") or {}
    try:
        speedup = float(paired["speedup"])
        low, high = (float(x) for x in paired["interval"])
    except (KeyError, TypeError, ValueError):
        return _unpaired(r)
    if not (_positive(speedup) and _positive(low) and _positive(high)):
        return _unpaired(r)
    return Claim(_decide(low, high), speedup, low, high, paired=True)


def _unpaired(r: Mapping[str, Any]) -> Claim:
    """No paired rounds: the interval that the two timings' IQRs, centred on their medians, allow."""
    timing = r.get("timing") or {}
    cand, ref = timing.get("candidate") or {}, timing.get("reference") or {}
    cand_ms = _float(cand.get("median_ms", r.get("candidate_ms")))
    ref_ms = _float(ref.get("median_ms", r.get("reference_ms")))
    if not (_positive(cand_ms) and _positive(ref_ms)):
        config = r.get("config") or {}
        return Claim("not_timed", why_not="--no-bench" if config.get("bench") is False else "no timing recorded")
    assert cand_ms is not None and ref_ms is not None
    cand_half, ref_half = (_float(cand.get("iqr_ms")) or 0.0) / 2, (_float(ref.get("iqr_ms")) or 0.0) / 2
    low = max(ref_ms - ref_half, 0.0) / (cand_ms + cand_half)
    high = (ref_ms + ref_half) / (cand_ms - cand_half) if cand_ms > cand_half else math.inf
    return Claim(_decide(low, high), ref_ms / cand_ms, low, high, paired=False)


def _decide(low: float, high: float) -> Verdict:
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    return "within_noise"


def improved(result: Mapping[str, Any] | None) -> bool:
    """THE rule for "improved" (faster than eager PyTorch beyond the noise): a proven win."""
    return claim_of(result).faster


def _interval(low: float | None, high: float | None) -> list[float | None] | None:
    """As JSON allows it: an unbounded upper end (a candidate IQR wider than its median) is null."""
    if low is None or high is None:
        return None
    return [low, high if math.isfinite(high) else None]


def _num(v: float | None) -> str:
    if v is None:
        return "?"
    if math.isinf(v):
        return "inf"
    return f"{v:.3g}"


def _float(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def _positive(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v > 0
