"""Evaluators on the executor's pools: `PoolEvaluator` (an `EvalPool`'s workers, or an outbox)
and `make_evaluator`, the one place that decides "in this process or on a pool" for the
optimiser, the RL reward and agent mode (evaluator.py holds the seam and the in-process one)."""

from __future__ import annotations

import itertools
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from warpforge.candidate import Candidate, EvalResult
from warpforge.config import EvalConfig
from warpforge.evaluator import Evaluator, LocalEvaluator
from warpforge.executor import EvalPool
from warpforge.executor.outbox import OutboxPool
from warpforge.executor.workers import Job
from warpforge.task import SUITE_DIR, Task


def make_evaluator(config: EvalConfig, *, pool: Any = None, executor: str | None = None, workers: int | None = None,
                   ray_address: str | None = None, outbox: str | Path | None = None, label: str = "candidate",
                   max_judges: int = 4) -> Evaluator:
    """Where candidates are evaluated: on `pool` (the caller's, left open), on a new pool of
    `executor` ("local" worker processes or "ray"), as job files in `outbox` (evaluated by
    `eval-batch --jobs` elsewhere), or in this process with up to `max_judges` warm Judges."""
    if pool is not None:
        return PoolEvaluator(pool, label)
    if executor is not None:
        return PoolEvaluator(EvalPool(config, executor, workers, ray_address), label, owns_pool=True)
    if outbox is not None:
        return PoolEvaluator(OutboxPool(outbox), label, owns_pool=True)
    return LocalEvaluator(config, max_judges)


class PoolEvaluator:
    """Evaluates on an `executor.EvalPool`'s workers: `submit` returns at once and evaluations
    overlap. A suite task goes to a worker by name (a Ray node resolves it in its own
    installation), any other by path. `close` closes the pool when this evaluator owns it."""

    def __init__(self, pool: Any, label: str = "candidate", owns_pool: bool = False) -> None:
        self.pool = pool
        self.label = label
        self.owns_pool = owns_pool
        self._index = itertools.count()

    def __enter__(self) -> PoolEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, task: Task, candidate: Candidate) -> Future[EvalResult]:
        suite = task.path.resolve().is_relative_to(SUITE_DIR.resolve())
        job = Job(next(self._index), task.name if suite else str(task.path), f"{self.label} {candidate.id}",
                  source=candidate.source, untrusted_task=task.untrusted)
        shipped = self.pool.submit(job)
        future: Future[EvalResult] = Future()

        def done(f: Future[dict[str, Any]]) -> None:
            try:
                future.set_result(EvalResult.from_dict(f.result()))
            except Exception as exc:
                future.set_exception(exc)

        shipped.add_done_callback(done)
        return future

    def close(self) -> None:
        if self.owns_pool:
            self.pool.close()
