"""An evaluator on another machine, through a folder: the inbox provider's counterpart.

`optimize --outbox DIR` writes each candidate to evaluate as `DIR/jobs/<key>.json` and waits for
`DIR/results/<key>.json`; `warpforge eval-batch --jobs DIR` (on any machine with the GPU, the
same checkout and the folder copied over) evaluates every job that has no result yet and writes
the results as they arrive. Whoever carries the folder between the two machines (rsync, a shared
file system, a device call that takes files in and out) is the transport. This is how a campaign
runs when the GPU machine cannot reach the model: the loop and the model on one machine, the
evaluations in batches on the other, every generation's jobs of all tasks at once
(`optimize --parallel-tasks`).

A job's key is a hash of its task (name and source) and the candidate's source, so the same
candidate of the same task is one job, and a loop run again after a stop finds its results
(and the archive skips what it has recorded). A job names its task by suite name, or by path
relative to the folder the loop ran in, when inside it (the GPU machine's checkout has the same
layout), else by absolute path; the task's source hash travels with it, and a machine whose
task file differs reports that job as a `task_error` instead of evaluating another program.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from warpforge.candidate import EvalResult
from warpforge.errors import UsageError
from warpforge.executor.workers import Job
from warpforge.task import SUITE_DIR, Task, load_task, resolve_task_path

POLL_S = 1.0


def job_key(task_ref: str, task_hash: str, source: str) -> str:
    return hashlib.sha256(json.dumps([task_ref, task_hash, source]).encode()).hexdigest()[:20]


def task_ref(task: Task) -> str:
    """How a job names its task: the suite name, else a path relative to here when inside it."""
    path = task.path.resolve()
    if path.is_relative_to(SUITE_DIR.resolve()):
        return task.name
    here = Path.cwd().resolve()
    return str(path.relative_to(here)) if path.is_relative_to(here) else str(path)


def _write(path: Path, data: dict[str, Any]) -> None:
    """Whole or not at all: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


class OutboxPool:
    """The `EvalPool` interface (`submit(job) -> Future[dict]`, `close()`) over a folder: a job
    is written, its future completes when the result file appears. A `PoolEvaluator` wraps it
    like any pool."""

    def __init__(self, folder: str | Path, poll_s: float = POLL_S) -> None:
        self.folder = Path(folder)
        self.jobs, self.results = self.folder / "jobs", self.folder / "results"
        try:
            self.jobs.mkdir(parents=True, exist_ok=True)
            self.results.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"the outbox {self.folder} cannot be made ({exc.strerror}); pass a writable folder") from None
        self.poll_s = poll_s
        self._waiting: dict[str, list[Future[dict[str, Any]]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="outbox-watcher", daemon=True)
        self._watcher.start()

    def submit(self, job: Job) -> Future[dict[str, Any]]:
        assert job.source is not None, "an outbox job carries its source"
        task = load_task(resolve_task_path(job.task))
        ref = task_ref(task)
        key = job_key(ref, task.source_hash, job.source)
        future: Future[dict[str, Any]] = Future()
        with self._lock:
            self._waiting.setdefault(key, []).append(future)
        if not (self.jobs / f"{key}.json").exists():
            _write(self.jobs / f"{key}.json", {"key": key, "task": ref, "task_hash": task.source_hash,
                                                "label": job.candidate, "source": job.source})
        self._collect()  # a result already there (a run resumed after its evaluation came back)
        return future

    def pending(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._waiting.values())

    def _collect(self) -> None:
        with self._lock:
            keys = list(self._waiting)
        for key in keys:
            path = self.results / f"{key}.json"
            if not path.exists():
                continue
            try:
                result = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # being copied in: the next poll reads it whole
            with self._lock:
                futures = self._waiting.pop(key, [])
            for future in futures:
                future.set_result(result)

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._collect()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for futures in waiting.values():
            for future in futures:
                future.cancel()


def pending_jobs(folder: str | Path) -> list[dict[str, Any]]:
    """The folder's jobs that have no result yet, oldest first."""
    folder = Path(folder)
    if not (folder / "jobs").is_dir():
        raise UsageError(f"{folder} holds no jobs/ folder: pass the folder `optimize --outbox` wrote")
    jobs = []
    for path in sorted((folder / "jobs").glob("*.json"), key=lambda p: p.stat().st_mtime):
        if (folder / "results" / path.name).exists():
            continue
        try:
            jobs.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return jobs


def check_task(job: dict[str, Any]) -> str | None:
    """Why this machine cannot evaluate the job's task as the loop meant it, or None."""
    try:
        task = load_task(resolve_task_path(str(job["task"])))
    except Exception as exc:  # noqa: BLE001  (whatever it is, the job is reported, not evaluated)
        return f"the task {job.get('task')} cannot be loaded here: {exc}"
    if task.source_hash != job.get("task_hash"):
        return f"the task {job['task']} here is not the program the loop sent (its source differs)"
    return None


def write_result(results: str | Path, key: str, result: EvalResult | dict[str, Any]) -> None:
    """One job's result into the `results` folder (the outbox's results/, or wherever the GPU
    machine collects them for the trip back)."""
    data = result.to_dict() if isinstance(result, EvalResult) else result
    results = Path(results)
    results.mkdir(parents=True, exist_ok=True)
    _write(results / f"{key}.json", data)
