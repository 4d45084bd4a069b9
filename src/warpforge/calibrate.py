"""A/A calibration: each task's own reference program, evaluated as its own candidate.

A harness that rejects the task's own program, or reads identical code as faster or slower,
is as broken as one that accepts a cheat. `calibrate(tasks, config)` renames each task's
`Model` to `ModelNew`, evaluates it with the ordinary evaluator (one `Judge` per task) and
returns a row per task; `summarise(rows)` counts what the targets count (rejections, and
speedups outside 1.00 ± the stated bound for tasks long enough to time). It changes nothing in
the evaluator: it only asks it the question it must answer "correct, 1.00x".
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from typing import Any

from warpforge import metrics
from warpforge.candidate import Candidate, EvalResult, Timing
from warpforge.config import EvalConfig, flat
from warpforge.errors import HarnessError, TaskError
from warpforge.task import Task

# issue 19's targets: identical code reads 1.00x within 3% on GPU tasks of at least 50 us
SPEED_BOUND = 0.03
MIN_TIMED_MS = 0.05


def as_candidate(task: Task) -> Candidate:
    """The task's own program as a candidate: `Model` renamed `ModelNew` (also where the source
    names it, e.g. `super(Model, self).__init__()`)."""
    source = task.path.read_text()
    return Candidate(re.sub(r"\bModel\b", "ModelNew", source), path=task.path, strategy="a/a")


def row(task: Task, result: EvalResult) -> dict[str, Any]:
    """What the A/A table shows for one task."""
    ref = result.reference.median_ms if result.reference else None
    return {"task": task.name, "status": result.status, "stage": result.stage, "speedup": result.speedup,
            "speedup_interval": result.speedup_interval, "timing_unstable": result.timing_unstable,
            "claim": result.claim.to_dict(), "reference_ms": ref, "candidate_ms": result.candidate.median_ms if result.candidate else None,
            "rel_l2_err": result.rel_l2_err, "tolerance": result.tolerance.get("rel_l2"),
            "reason": result.reason, "warnings": list(result.warnings), "hardware": result.hardware,
            "strict_fp32": bool(flat(result.config).get("strict_fp32")),  # the bar's precision mode (--strict-fp32)
            # what explains a speedup away from 1.00x: each round's medians, and each side's host
            # latency and sync tail (bench.py)
            "paired": result.paired, "timing": {side: _timing_facts(t) for side, t in
                                                (("reference", result.reference), ("candidate", result.candidate)) if t}}


def _timing_facts(timing: Timing) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(timing).items() if k != "samples_ms"}


def calibrate(tasks: Iterable[Task], config: EvalConfig,
              on_row: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Evaluate every task's reference against itself; a task that cannot even be loaded is a row
    with status `task_error` (the harness is not to blame, but the table must say so), one the
    harness could not run (its reference process died: out of GPU memory, say) `harness_error`."""
    from warpforge.evaluate import Judge

    rows = []
    for task in tasks:
        try:
            with Judge(task, config) as judge:
                out = row(task, judge.evaluate(as_candidate(task)))
        except (TaskError, HarnessError) as exc:  # one task's failure is its row, not the end of the run
            status = "task_error" if isinstance(exc, TaskError) else "harness_error"
            out = {"task": task.name, "status": status, "stage": "reference", "speedup": None,
                   "speedup_interval": None, "timing_unstable": False,
                   "reference_ms": None, "candidate_ms": None, "rel_l2_err": None, "tolerance": None,
                   "reason": str(exc), "warnings": [], "hardware": {}}
        rows.append(out)
        if on_row is not None:
            on_row(out)
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts against the targets: every reference accepted; identical code within 1.00 ± 3% on
    tasks of at least 50 us."""
    accepted = [r for r in rows if r["status"] == "correct"]
    timed = [r for r in accepted if r["speedup"] and r["reference_ms"] and r["reference_ms"] >= MIN_TIMED_MS]
    outside = [r["task"] for r in timed if abs(r["speedup"] - 1.0) > SPEED_BOUND]
    speedups = [r["speedup"] for r in accepted if r["speedup"]]
    intervals = [r["speedup_interval"] for r in accepted if r.get("speedup_interval")]
    return {"tasks": len(rows), "accepted": len(accepted),
            "interval_excludes_1": [r["task"] for r in accepted if r.get("speedup_interval")
                                    and not r["speedup_interval"][0] <= 1.0 <= r["speedup_interval"][1]],
            "timing_unstable": [r["task"] for r in accepted if r.get("timing_unstable")],
            "paired": len(intervals),
            "rejected": [r["task"] for r in rows if r["status"] != "correct"],
            "timed_at_least_50us": len(timed), "outside_3pct": outside,
            "geomean_speedup": metrics.geometric_mean(speedups) if speedups else None,
            "min_speedup": min(speedups) if speedups else None, "max_speedup": max(speedups) if speedups else None}
