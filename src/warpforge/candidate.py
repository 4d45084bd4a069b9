"""The two records that cross every stage: a `Candidate` (what was proposed) and an
`EvalResult` (what the evaluator decided about it).

Both are frozen. `EvalResult.to_dict()` is the `warpforge eval --json` object (a contract,
see ARCHITECTURE.md): only extend it. An `EvalResult` redacts secrets (redact.py) from the text a
child produced as it is built, whichever way it is built.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

from warpforge.claim import Claim, claim_of
from warpforge.errors import UsageError
from warpforge.redact import redact, redact_data, secret_values

# A verdict on the candidate, or `task_error`: the task itself could not be loaded or run (a
# worker of an executor reports it at stage `load`; no verdict on the candidate). `crashed` at
# stage `executor`: the worker evaluating it died more times than the executor retries.
Status = Literal["correct", "incorrect", "compile_error", "runtime_error", "timeout", "crashed", "rejected",
                 "task_error"]
Stage = Literal["static", "compile", "verify", "bench", "profile", "reference", "done", "load", "executor"]
STATUSES: tuple[Status, ...] = ("correct", "incorrect", "compile_error", "runtime_error", "timeout", "crashed", "rejected",
                                "task_error")

# What a compile-pool job reports (evaluate.precompile): never a verdict, which the GPU worker's
# evaluation gives. `compiled`: the import built what it builds into the cache; `skipped`: the
# static policy refuses the source, so nothing was built; `compile_error`, `timeout`, `crashed`
# mean what they mean in Status.
PrecompileStatus = Literal["compiled", "skipped", "compile_error", "timeout", "crashed"]


class Precompiled(TypedDict, total=False):
    """A compile-pool job's report: its status and seconds, or why the job itself was lost."""

    status: PrecompileStatus
    seconds: float
    reason: str


@dataclass(frozen=True)
class Candidate:
    source: str
    path: Path | None = None
    parents: tuple[str, ...] = ()
    strategy: str = ""
    model: str = ""

    @property
    def id(self) -> str:
        """Content hash: the same source is the same candidate, whoever proposed it."""
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    @classmethod
    def from_file(cls, path: str | Path) -> Candidate:
        p = Path(path)
        if not p.is_file():
            raise UsageError(f"candidate file {p} does not exist: give the path to a .py file defining ModelNew")
        try:
            return cls(source=p.read_text(), path=p.resolve())
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read candidate {p}: {exc}") from None


@dataclass(frozen=True)
class Timing:
    """One timed program, the one record of a timing run from the timed loop (bench.time_calls)
    through the process boundary (`to_dict`/`from_dict`) to the verdict: device-time statistics
    over its timed calls (ms), the host's latency, the raw samples and, where they apply, the
    CUDA sync figures and the content-cache probe's two numbers."""

    median_ms: float
    iqr_ms: float
    min_ms: float
    mean_ms: float
    n: int
    host_median_ms: float
    samples_ms: tuple[float, ...] = ()
    tail_median_ms: float | None = None
    """CUDA: device time from the end of the caller's stream to the end event recorded after the
    device-wide synchronize (the sync's round trip, counted in every timed call; bench.py)."""
    sync_floor_ms: float | None = None
    """CUDA, untrusted calls: the median round trip taken off each call's synchronize."""
    first_seen_min_ms: float | None = None
    """The fastest call on an input set first seen in the timed loop (bench.ProbeSchedule)."""
    repeat_median_ms: float | None = None
    """The median of the calls next to those, on sets seen before."""

    def to_dict(self, samples: bool = True) -> dict[str, Any]:
        """The JSON form (a result's `candidate`/`reference` objects, and a timing run's message
        from a child): the optional figures only where they were measured."""
        d = {k: v for k, v in dataclasses.asdict(self).items() if v is not None or k == "tail_median_ms"}
        if samples:
            d["samples_ms"] = list(self.samples_ms)
        else:
            d.pop("samples_ms")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Timing:
        def optional(key: str) -> float | None:
            return float(d[key]) if d.get(key) is not None else None

        return cls(
            median_ms=float(d["median_ms"]), iqr_ms=float(d["iqr_ms"]), min_ms=float(d["min_ms"]),
            mean_ms=float(d["mean_ms"]), n=int(d["n"]), host_median_ms=float(d["host_median_ms"]),
            samples_ms=tuple(float(x) for x in d.get("samples_ms", ())), tail_median_ms=optional("tail_median_ms"),
            sync_floor_ms=optional("sync_floor_ms"), first_seen_min_ms=optional("first_seen_min_ms"),
            repeat_median_ms=optional("repeat_median_ms"),
        )


@dataclass(frozen=True)
class EvalResult:
    status: Status
    reason: str
    stage: Stage
    task: str = ""
    candidate_id: str = ""
    max_abs_err: float | None = None
    rel_l2_err: float | None = None
    tolerance: dict[str, float] = field(default_factory=dict)
    trials: int = 0
    candidate: Timing | None = None
    reference: Timing | None = None
    compiled_reference: Timing | None = None
    hardware: dict[str, Any] = field(default_factory=dict)
    kernels: dict[str, Any] = field(default_factory=dict)
    roofline: dict[str, Any] = field(default_factory=dict)
    compile_log: str = ""
    output_tail: str = ""
    stage_seconds: dict[str, float] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    paired: dict[str, Any] = field(default_factory=dict)
    """Paired timing (evaluate/verdict.py): the rounds' reference and candidate medians, the
    speedup (median of the rounds' ratios), its interval and whether it was too wide to claim."""

    def __post_init__(self) -> None:
        # The one gate for text a child produced (reason, compiler log, output, the profile it
        # reported): every result is built here, also by dataclasses.replace and from_dict, so the
        # archive, reports, MCP replies and repair prompts only ever see it redacted.
        secrets = secret_values()
        for name in ("reason", "compile_log", "output_tail"):
            object.__setattr__(self, name, redact(getattr(self, name), secrets))
        object.__setattr__(self, "warnings", tuple(redact(w, secrets) for w in self.warnings))
        object.__setattr__(self, "kernels", redact_data(self.kernels, secrets))

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    @property
    def claim(self) -> Claim:
        """What this result may say about the candidate's speed (claim.py: the one rule)."""
        return claim_of(self.to_dict(samples=False))

    @property
    def timing_unstable(self) -> bool:
        """The paired interval straddles 1 and stayed wider than its bound after re-measuring
        (a description of the interval: the speedup and its interval are still reported)."""
        interval = self.speedup_interval
        return bool(self.paired.get("unstable")) and interval is not None and interval[0] <= 1.0 <= interval[1]

    @property
    def speedup_interval(self) -> tuple[float, float] | None:
        interval = self.paired.get("interval")
        return (float(interval[0]), float(interval[1])) if interval else None

    @property
    def speedup(self) -> float | None:
        """Reference over candidate time: the paired speedup when the two were timed in rounds,
        else the ratio of the two medians. Always the point estimate; whether it is a claim of
        "faster" is `claim` (its interval), never whether this is None."""
        if self.paired.get("speedup"):
            return float(self.paired["speedup"])
        if self.candidate and self.reference and self.candidate.median_ms > 0:
            return self.reference.median_ms / self.candidate.median_ms
        return None

    @property
    def speedup_vs_compile(self) -> float | None:
        if self.candidate and self.compiled_reference and self.candidate.median_ms > 0:
            return self.compiled_reference.median_ms / self.candidate.median_ms
        return None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalResult:
        """Inverse of `to_dict` (a result that crossed a process or machine boundary)."""
        timing = d.get("timing") or {}

        def t(key: str) -> Timing | None:
            return Timing.from_dict(timing[key]) if timing.get(key) else None

        return cls(d["status"], d.get("reason", ""), d.get("stage", "static"), task=d.get("task", ""),
                   candidate_id=d.get("candidate_id", ""), max_abs_err=d.get("max_abs_err"),
                   rel_l2_err=d.get("rel_l2_err"), tolerance=dict(d.get("tolerance") or {}), trials=int(d.get("trials") or 0),
                   candidate=t("candidate"), reference=t("reference"), compiled_reference=t("torch_compile"),
                   hardware=dict(d.get("hardware") or {}), kernels=dict(d.get("kernels") or {}),
                   roofline=dict(d.get("roofline") or {}), compile_log=d.get("compile_log", ""),
                   output_tail=d.get("output_tail", ""), stage_seconds=dict(d.get("stage_seconds") or {}),
                   warnings=tuple(d.get("warnings") or ()), config=dict(d.get("config") or {}),
                   paired=dict(d.get("paired") or {}))

    def to_dict(self, samples: bool = True) -> dict[str, Any]:
        """The `warpforge eval --json` object."""
        def timing(t: Timing | None) -> dict[str, Any] | None:
            return None if t is None else t.to_dict(samples)

        out: dict[str, Any] = {
            "status": self.status,
            "correct": self.correct,
            "reason": self.reason,
            "stage": self.stage,
            "task": self.task,
            "candidate_id": self.candidate_id,
            "max_abs_err": self.max_abs_err,
            "rel_l2_err": self.rel_l2_err,
            "tolerance": self.tolerance,
            "trials": self.trials,
            "speedup": self.speedup,
            "speedup_interval": list(self.speedup_interval) if self.speedup_interval else None,
            "timing_unstable": self.timing_unstable,
            "claim": None,  # filled below, from this very dictionary
            "speedup_vs_compile": self.speedup_vs_compile,
            "candidate_ms": self.candidate.median_ms if self.candidate else None,
            "reference_ms": self.reference.median_ms if self.reference else None,
            "compile_ms": self.compiled_reference.median_ms if self.compiled_reference else None,
            "timing": {
                "candidate": timing(self.candidate),
                "reference": timing(self.reference),
                "torch_compile": timing(self.compiled_reference),
            },
            "hardware": self.hardware,
            "kernels": self.kernels,
            "roofline": self.roofline,
            "compile_log": self.compile_log,
            "output_tail": self.output_tail,
            "stage_seconds": self.stage_seconds,
            "warnings": list(self.warnings),
            "config": self.config,
            "paired": self.paired,
        }
        out["claim"] = claim_of(out).to_dict()
        return out
