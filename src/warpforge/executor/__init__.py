"""Executors: many (task, candidate) evaluations at once — one worker per GPU of this machine
(`local`), or workers on a Ray cluster (`ray`) — with no result lost and none counted twice.

A *worker* (`EvalWorker`) is one long-lived process that evaluates jobs one after another
through a `Judge` per task, so a task's reference process, baselines and spare candidate
processes are reused; the Judge is recycled after `recycle_after` evaluations and after any
CUDA error. On CUDA there is one worker per GPU (pinned with CUDA_VISIBLE_DEVICES, or by Ray's
`num_gpus=1`), so each GPU times one candidate at a time; on the CPU, a few workers.

The driver (`EvalPool`) keeps one thread per worker pulling jobs from one queue; `submit`
returns a Future. The queue is task-affine (`TaskQueue`): a worker takes a job of a task it has
warm first, then one of a task no worker has, then the oldest, because starting a task's Judge
(its reference process, baselines and torch.compile) costs more than several evaluations.
When a worker dies mid-job (killed, out of memory, a lost Ray node), it is restarted and the
job goes back on the queue, up to `retries` times; a job's Future is set once, so every job
gets exactly one result; a dead local worker's temporary files and any process its candidates
left behind are removed first (workers.py). Only the driver writes results (and archives).
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, as_completed
from concurrent.futures import wait as wait_futures
from pathlib import Path
from typing import Any

from warpforge.candidate import Precompiled
from warpforge.config import EvalConfig
from warpforge.errors import UsageError
from warpforge.executor.compile_pool import Compiler, default_compile_workers, needs_build
from warpforge.executor.workers import (EvalWorker, Job, LocalSlot, RaySlot, Slot, WorkerLost,
                                        local_slots, ray_slots)
from warpforge.target import Target

__all__ = ["EXECUTORS", "Compiler", "EvalPool", "EvalWorker", "Job", "LocalSlot", "RaySlot", "Slot", "TaskQueue", "WorkerLost",
           "default_compile_workers", "evaluate_batch", "local_slots", "ray_slots", "run_jobs"]

EXECUTORS = ("local", "ray")


Item = tuple[Job, int, "Future[dict[str, Any]]"]  # a job, its attempt, its result


class TaskQueue:
    """The pool's job queue, task-affine. `get(worker)` returns, in this order of preference,
    the oldest job of a task that worker ran recently (its Judge is still up), the oldest job of
    a task no worker has warm, or the oldest job; so N workers split the tasks among them instead
    of each starting every task. A job passed over `patience` times is taken next, so a stream of
    one task's jobs cannot starve another's. `close(n)` ends `n` getters once the jobs are gone."""

    def __init__(self, warm: int = 4, patience: int = 64) -> None:
        self.warm, self.patience = warm, patience
        self._items: list[Item] = []
        self._skipped = 0  # how often the oldest job was passed over
        self._warm: dict[str, OrderedDict[str, None]] = {}  # worker -> its recent tasks, most recent last
        self._stops = 0
        self._cond = threading.Condition()

    def put(self, item: Item) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify()

    def held(self) -> threading.Condition:
        """`with queue.held():` puts a batch in before any worker takes from it, so the workers
        see all of its tasks at once and split them (jobs put one at a time all go to the first task)."""
        return self._cond

    def close(self, getters: int) -> None:
        with self._cond:
            self._stops += getters
            self._cond.notify_all()

    def forget(self, worker: str) -> None:
        """The worker restarted: none of its tasks is warm any more."""
        with self._cond:
            self._warm.pop(worker, None)

    def get(self, worker: str) -> Item | None:
        with self._cond:
            while not self._items and not self._stops:
                self._cond.wait()
            if not self._items:
                self._stops -= 1
                return None
            i = self._pick(worker)
            self._skipped = self._skipped + 1 if i else 0
            item = self._items.pop(i)
            mine: OrderedDict[str, None] = self._warm.setdefault(worker, OrderedDict())
            mine[item[0].task] = None
            mine.move_to_end(item[0].task)
            while len(mine) > self.warm:
                mine.popitem(last=False)
            return item

    def _pick(self, worker: str) -> int:
        if self._skipped >= self.patience:
            return 0
        mine = self._warm.get(worker) or OrderedDict()
        for i, (job, _, _) in enumerate(self._items):
            if job.task in mine:
                return i
        others = {t for w, tasks in self._warm.items() if w != worker for t in tasks}
        for i, (job, _, _) in enumerate(self._items):
            if job.task not in others:
                return i
        return 0


def run_jobs(jobs: Sequence[Job], slots: Sequence[Slot], on_result: Callable[[Job, dict[str, Any]], None] | None = None,
             retries: int = 2) -> list[dict[str, Any]]:
    """Run every job on the given slots (which stay open); results in job order, one per job."""
    pool = EvalPool.from_slots(list(slots), retries)
    try:
        return pool.map(jobs, on_result)
    finally:
        pool.stop()


class EvalPool:
    """Long-lived workers and one job queue: `submit` returns a Future, `map` runs a batch.

    One driver thread per worker takes jobs from the queue. When a worker dies mid-job it is
    restarted and the job goes back on the queue (at most `retries` times, then a `crashed`
    result); a job's Future is set once, so every job has exactly one result. Jobs submitted from
    several threads (an optimisation loop evaluating replies as they arrive) share the workers.

    On CUDA, a candidate that builds an extension (load_inline) first goes through the compile
    pool (`Compiler`, `compile_workers` CPUs; 0 turns it off) and reaches the GPU queue when its
    build is in the cache; the pool pins TORCH_CUDA_ARCH_LIST to the GPU's arch so the compile
    children (which see no GPU) and the GPU workers build the same thing under the same key.
    """

    def __init__(self, config: EvalConfig, executor: str = "local", workers: int | None = None,
                 ray_address: str | None = None, retries: int = 2, compile_workers: int | None = None) -> None:
        if executor not in EXECUTORS:
            raise UsageError(f"unknown executor {executor!r}: use local or ray")
        cfg = config.resolved()
        target = None
        if cfg.device == "cuda" and compile_workers != 0:
            from warpforge.evaluate.hardware import visible_gpu_arch

            target = Target.from_arch_list(os.environ.get("TORCH_CUDA_ARCH_LIST") or visible_gpu_arch())
        env = {"TORCH_CUDA_ARCH_LIST": target.arch_list} if target is not None and target.arch else {}
        if executor == "local":
            slots = local_slots(config, workers, env=env)
        else:
            slots = ray_slots(config, workers, ray_address, env=env)
        compiler = None
        if target is not None and target.arch:
            n = compile_workers if compile_workers is not None else default_compile_workers(len(slots))
            compiler = Compiler(cfg, target, n, executor)
        self._start(slots, retries, compiler)

    @classmethod
    def from_slots(cls, slots: list[Slot], retries: int = 2, compiler: Compiler | None = None) -> EvalPool:
        if not slots:
            raise UsageError("no workers to run on")
        pool = cls.__new__(cls)
        pool._start(slots, retries, compiler)
        return pool

    def _start(self, slots: list[Slot], retries: int, compiler: Compiler | None = None) -> None:
        self.slots, self.retries, self.compiler = slots, retries, compiler
        self._compiling: set[Future[Precompiled]] = set()
        self._precompiled: dict[Future[dict[str, Any]], Precompiled] = {}  # job future -> its compile job
        self._lock = threading.Lock()
        self._queue = TaskQueue()
        self._threads = [threading.Thread(target=self._serve, args=(s,), name=f"executor-{s.name}", daemon=True)
                         for s in slots]
        for t in self._threads:
            t.start()

    def _serve(self, slot: Slot) -> None:
        while True:
            item = self._queue.get(slot.name)
            if item is None:
                return
            job, attempt, future = item
            try:
                result = slot.run(job)
            except WorkerLost as exc:
                self._queue.forget(slot.name)
                reason = f"its worker died {attempt + 1} times ({exc})"
                try:
                    slot.restart()
                except Exception as again:  # no worker to retry on here: this job's result says so, no one waits forever
                    reason = f"its worker died ({exc}) and could not be restarted ({type(again).__name__}: {again})"
                else:
                    if attempt < self.retries:
                        self._queue.put((job, attempt + 1, future))
                        continue
                result = {"status": "crashed", "correct": False, "stage": "executor", "reason": reason,
                          "task": job.task, "candidate": job.candidate, "worker": slot.name}
            except Exception as exc:  # a driver-side failure must not leave the caller waiting forever
                if not future.done():
                    future.set_exception(exc)
                continue
            if not future.done():
                if future in self._precompiled:
                    result["precompile"] = self._precompiled.pop(future)
                future.set_result(result)

    def __enter__(self) -> EvalPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, job: Job) -> Future[dict[str, Any]]:
        future: Future[dict[str, Any]] = Future()
        source = job.source
        if self.compiler is not None and source is None:
            try:
                source = Path(job.candidate).read_text()
            except (OSError, UnicodeDecodeError):
                source = None  # the worker reports the unreadable file
        if self.compiler is None or source is None or not needs_build(source):
            self._queue.put((job, 0, future))
            return future
        compiled = self.compiler.submit(source)
        with self._lock:
            self._compiling.add(compiled)

        def queue_it(done: Future[Precompiled]) -> None:
            try:
                self._precompiled[future] = done.result()
            except Exception as exc:  # a lost compile task: the GPU worker compiles it itself
                self._precompiled[future] = {"status": "crashed", "reason": f"{type(exc).__name__}: {exc}"}
            self._queue.put((job, 0, future))
            with self._lock:
                self._compiling.discard(done)

        compiled.add_done_callback(queue_it)
        return future

    def map(self, jobs: Sequence[Job], on_result: Callable[[Job, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
        """Run `jobs`; results in job order; `on_result` as each one arrives (in this thread)."""
        with self._queue.held():
            futures = {self.submit(job): job for job in jobs}
        for future in as_completed(futures):
            if on_result is not None:
                on_result(futures[future], future.result())
        return [f.result() for f in futures]

    def stop(self) -> None:
        """Stop the driver threads (after the queued and compiling jobs); the workers stay up."""
        while True:
            with self._lock:
                pending = list(self._compiling)
            if not pending:
                break
            wait_futures(pending)
            time.sleep(0.01)  # the done-callbacks queue their jobs, then leave the set
        self._queue.close(len(self._threads))
        for t in self._threads:
            t.join()
        self._threads = []

    def close(self) -> None:
        """Stop and shut the workers down."""
        self.stop()
        for s in self.slots:
            s.close()
        self.slots = []
        if self.compiler is not None:
            self.compiler.close()


def evaluate_batch(pairs: Sequence[tuple[str, str]], config: EvalConfig, executor: str = "local", workers: int | None = None,
                   ray_address: str | None = None, on_result: Callable[[Job, dict[str, Any]], None] | None = None,
                   compile_workers: int | None = None) -> list[dict[str, Any]]:
    """Evaluate (task path, candidate path) pairs; `warpforge eval` result dicts plus task,
    candidate and worker, in the order of `pairs`."""
    with EvalPool(config, executor, workers, ray_address, compile_workers=compile_workers) as pool:
        return pool.map([Job(i, t, c) for i, (t, c) in enumerate(pairs)], on_result)
