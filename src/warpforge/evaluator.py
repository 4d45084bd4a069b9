"""One seam for "evaluate this candidate of this task", whoever does the evaluating.

    Evaluator                 submit(task, candidate) -> Future[EvalResult]; close()
     ├── LocalEvaluator       in this process, one evaluation at a time, with a warm `Judge` per
     │                        task (a few; the least recently used is closed): the only cache of
     │                        Judges outside a pool's workers
     └── PoolEvaluator        on an `executor.EvalPool`'s workers (worker processes, or Ray actors),
                              evaluations overlapping (executor/evaluators.py: it is the
                              executor's, which builds on this module, never the reverse)

The optimiser (`search.loop`), the RL reward (`reward.KernelReward`) and agent mode
(`agent.tools`) each take one evaluator, made by `executor.make_evaluator`, so "in process or on
a pool" is decided once, where they are built. A `LocalEvaluator`'s future is already done when `submit` returns (the
evaluation ran in the caller's thread); a `PoolEvaluator`'s completes when a worker answers. A
worker lost for good gives an ordinary `crashed` result at stage `executor` (the pool's rule),
not an exception.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from concurrent.futures import Future
from typing import TYPE_CHECKING, Protocol

from warpforge.candidate import Candidate, EvalResult
from warpforge.config import EvalConfig
from warpforge.task import Task

if TYPE_CHECKING:
    from warpforge.evaluate import Judge


class Evaluator(Protocol):
    def submit(self, task: Task, candidate: Candidate) -> Future[EvalResult]:
        """Evaluate `candidate` against `task`; the future holds its EvalResult (or the harness's
        error: a task that cannot be loaded raises TaskError from `result()` in process)."""
        ...

    def close(self) -> None:
        """Stop whatever this evaluator keeps warm. Idempotent."""
        ...


class LocalEvaluator:
    """Evaluates in this process, one candidate at a time, keeping a warm Judge per task (up to
    `max_judges`; the least recently used is closed first). A Judge whose evaluation raised is
    closed, and so is one that has evaluated `recycle_after` candidates (when given); the task's
    next candidate starts a fresh one."""

    def __init__(self, config: EvalConfig | None = None, max_judges: int = 4, recycle_after: int | None = None) -> None:
        self.config = config or EvalConfig()
        self.max_judges = max(1, max_judges)
        self.recycle_after = recycle_after
        self._judges: OrderedDict[tuple[str, str, bool], Judge] = OrderedDict()
        self._uses: dict[tuple[str, str, bool], int] = {}  # evaluations by each warm Judge

    def __enter__(self) -> LocalEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, task: Task, candidate: Candidate) -> Future[EvalResult]:
        future: Future[EvalResult] = Future()
        try:
            future.set_result(self.evaluate(task, candidate))
        except Exception as exc:  # the caller's result() raises it, as a pool's future would
            future.set_exception(exc)
        return future

    def evaluate(self, task: Task, candidate: Candidate) -> EvalResult:
        """`submit(...).result()`, without the future. A task whose program ran out of GPU memory
        while other tasks' Judges were warm (their reference processes hold their input sets on
        the GPU: four KernelBench level-1 tasks hold more than an H100 has) is tried once more
        with them closed: the first run says nothing about the task or the candidate."""
        result = self._evaluate(task, candidate)
        if result.status == "task_error" and "out of memory" in result.reason.lower() and len(self._judges) > 1:
            for key in [k for k in self._judges if k != task.key]:
                self._uses.pop(key, None)
                self._judges.pop(key).close()
            self.drop(task)
            result = self._evaluate(task, candidate)
            result = dataclasses.replace(result, warnings=(
                *result.warnings, "evaluated again after closing other tasks' warm Judges: the task ran out of GPU "
                "memory beside them"))
        return result

    def _evaluate(self, task: Task, candidate: Candidate) -> EvalResult:
        judge = self.judge(task)
        try:
            result = judge.evaluate(candidate)
        except BaseException:
            self.drop(task)
            raise
        key = task.key
        self._uses[key] = self._uses.get(key, 0) + 1
        if self.recycle_after and self._uses[key] >= self.recycle_after:
            self.drop(task)
        return result

    def judge(self, task: Task) -> Judge:
        """The task's warm Judge, started on first use (most recently used last)."""
        from warpforge.evaluate import Judge

        key = task.key
        judge = self._judges.pop(key, None)
        if judge is None:
            while len(self._judges) >= self.max_judges:
                oldest, evicted = self._judges.popitem(last=False)
                self._uses.pop(oldest, None)
                evicted.close()
            judge = Judge(task, self.config)
        self._judges[key] = judge
        return judge

    def drop(self, task: Task) -> None:
        """Close the task's Judge, if one is warm."""
        self._uses.pop(task.key, None)
        judge = self._judges.pop(task.key, None)
        if judge is not None:
            judge.close()

    def close(self) -> None:
        self._uses.clear()
        while self._judges:
            self._judges.popitem()[1].close()
