"""Which recorded run an optimize command continues, and whether its budget leaves anything to do.

A run is known by its key: a hash of its configuration and tasks *without the budget*. How far
to go is not which run it is, so the same command resumes its run, a larger `--max-candidates`
(or target, or token budget) continues a finished one, and a finished run asked again with the
same budget has nothing left: the caller says so and asks nothing of the model. This module
reads the archive only; it does not plan, propose or lock (loop.py).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from warpforge.archive import Archive, RunRow, best_attempt, target_reached
from warpforge.config import flat


def run_keys(config: dict[str, Any]) -> tuple[str, str]:
    """(the key, the key the same command had before budgets left it): runs recorded by older
    versions are still resumed by the command that started them."""
    without_budget = {**config, "budget": None}
    return _digest(without_budget), _digest(config)


def latest_run(archive: Archive, config: dict[str, Any]) -> RunRow | None:
    """The latest run of this configuration and these tasks, whatever its status or budget."""
    keys = run_keys(config)
    return next((run for run in reversed(archive.runs())
                 if json.loads(run.config or "{}").get("key") in keys), None)


def work_left(archive: Archive, run_id: str, task: str, candidates: int, target_speedup: float | None) -> bool:
    """The run has something to do for `task` under this budget: a recorded program still to
    evaluate, or a step below `candidates` not yet proposed while the target (if any) is unmet."""
    if archive.unevaluated(run_id, task):
        return True
    steps = archive.steps(run_id, task)
    if target_speedup is not None and target_reached(best_attempt(steps.values()), target_speedup):
        return False
    return any(step not in steps for step in range(candidates))


def _digest(config: dict[str, Any]) -> str:
    # the evaluation settings flat, as runs recorded them before EvalConfig grouped its fields
    evaluation = config.get("eval")
    if isinstance(evaluation, dict):
        config = {**config, "eval": flat(evaluation)}
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]
