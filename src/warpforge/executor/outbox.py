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

The folder comes from elsewhere (docs/evaluation.md, "The trust boundary"): a job's key must be
its file's name and a plain name (`KEY`), or the job is refused; a task file inside the folder
has its program (the reference process) run inside the sandbox, like a candidate's, unless the
operator trusts the folder's tasks (`eval-batch --trust-tasks`); files are read only when
regular and small (untrusted.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from warpforge.candidate import EvalResult
from warpforge.errors import UsageError
from warpforge.executor.workers import Job
from warpforge.task import SUITE_DIR, Task, load_task, resolve_task_path
from warpforge.untrusted import read_regular, write_atomically

POLL_S = 1.0
KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What a job key may be (job_key makes 20 hex digits): a plain file name, never a path."""
MAX_FILE_BYTES = 64 << 20
"""A job or result file larger than this is not read (a job holds one source; a result, samples)."""


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
    write_atomically(path, json.dumps(data))


def _read(path: Path) -> Any:
    """A job or result file's JSON; OSError or ValueError when it is not (yet) one to read."""
    return json.loads(read_regular(path, MAX_FILE_BYTES))


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
                result = _read(path)
            except (OSError, ValueError):
                continue  # being copied in: the next poll reads it whole
            if not isinstance(result, dict):
                continue
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
    """The folder's jobs that have no result yet, oldest first. A file whose name is not a `KEY`
    is not a job (the loop writes none); a job whose `key` is not its file's name comes back with
    `refused` saying so, and is evaluated by nobody (`check_task`)."""
    folder = Path(folder)
    if not (folder / "jobs").is_dir():
        raise UsageError(f"{folder} holds no jobs/ folder: pass the folder `optimize --outbox` wrote")
    jobs = []
    for path in sorted((folder / "jobs").glob("*.json"), key=_age):
        if not KEY.fullmatch(path.stem) or (folder / "results" / path.name).exists():
            continue
        try:
            job = _read(path)
        except (OSError, ValueError):
            continue  # being copied in (or not a job at all)
        why = _malformed(job, path.stem)
        if why:  # returned so that it gets a result (a refusal), under its file's name
            task = job.get("task") if isinstance(job, dict) else None
            job = {"key": path.stem, "task": str(task)[:200], "task_hash": "", "label": path.stem, "source": "",
                   "refused": f"the job file {path.name} {why}"}
        jobs.append(job)
    return jobs


def _malformed(job: Any, name: str) -> str | None:
    """Why a job file's content is not a job as `OutboxPool` writes them, or None."""
    if not isinstance(job, dict):
        return "is not a JSON object"
    if job.get("key") != name:
        return f"names another key ({str(job.get('key'))[:80]!r}): a job's key is its file's name"
    if not isinstance(job.get("task"), str) or not isinstance(job.get("source"), str):
        return "names no task or carries no source"
    return None


def _age(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def check_task(job: dict[str, Any]) -> str | None:
    """Why this machine cannot evaluate the job's task as the loop meant it, or None."""
    if job.get("refused"):
        return str(job["refused"])
    try:
        task = load_task(resolve_task_path(str(job["task"])))
    except Exception as exc:  # noqa: BLE001  (whatever it is, the job is reported, not evaluated)
        return f"the task {job.get('task')} cannot be loaded here: {exc}"
    if task.source_hash != job.get("task_hash"):
        return f"the task {job['task']} here is not the program the loop sent (its source differs)"
    return None


def came_with_jobs(job: dict[str, Any], folder: str | Path) -> bool:
    """Whether the job's task file lies inside the jobs folder (a link into it counts): it came with
    the jobs, not from the operator, so its program runs only inside the sandbox (Task.untrusted)."""
    try:
        real = resolve_task_path(str(job["task"])).resolve()
    except Exception:  # noqa: BLE001  (check_task reports why it cannot be loaded)
        return False
    return real.is_relative_to(Path(folder).resolve()) and not real.is_relative_to(SUITE_DIR.resolve())


def write_result(results: str | Path, key: str, result: EvalResult | dict[str, Any]) -> None:
    """One job's result into the `results` folder (the outbox's results/, or wherever the GPU
    machine collects them for the trip back)."""
    if not KEY.fullmatch(key):  # a key becomes a file name: never a path out of `results`
        raise UsageError(f"{key[:80]!r} is not a job key: a key is letters, digits, '_' and '-'")
    data = result.to_dict() if isinstance(result, EvalResult) else result
    results = Path(results)
    results.mkdir(parents=True, exist_ok=True)
    _write(results / f"{key}.json", data)
