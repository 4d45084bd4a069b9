"""Executors: many (task, candidate) evaluations at once — one worker per GPU of this machine
(`local`), or workers on a Ray cluster (`ray`) — with no result lost and none counted twice.

A *worker* (`EvalWorker`) is one long-lived process that evaluates jobs one after another
through a `Judge` per task, so a task's reference process, baselines and spare candidate
processes are reused; the Judge is recycled after `recycle_after` evaluations and after any
CUDA error. On CUDA there is one worker per GPU (pinned with CUDA_VISIBLE_DEVICES, or by Ray's
`num_gpus=1`), so each GPU times one candidate at a time; on the CPU, a few workers.

The driver (`EvalPool`) keeps one thread per worker pulling jobs from one queue; `submit`
returns a Future. When a worker dies mid-job (killed, out of memory, a lost Ray node), it is
restarted and the job goes back on the queue, up to `retries` times; a job's Future is set
once, so every job gets exactly one result. Only the driver writes results (and archives).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from warpforge.config import EvalConfig
from warpforge.errors import UsageError, WarpforgeError

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Job:
    index: int
    task: str
    candidate: str
    """A candidate file's path, or a label when `source` is given."""
    source: str | None = None
    """The candidate's source text (no file needed on the worker's machine)."""


class WorkerLost(Exception):
    """The worker died or disconnected while running a job."""


def config_from_dict(d: dict[str, Any]) -> EvalConfig:
    d = dict(d)
    if isinstance(d.get("server_gap_ms"), list):
        d["server_gap_ms"] = tuple(d["server_gap_ms"])
    return EvalConfig(**d)


class EvalWorker:
    """Evaluates jobs in this process, keeping a Judge for each of the last `judges` tasks (jobs of
    several tasks interleave, e.g. when the compile pool finishes them out of order)."""

    def __init__(self, config: dict[str, Any], recycle_after: int = 50, name: str = "",
                 env: dict[str, str] | None = None, judges: int = 4) -> None:
        os.environ.update(env or {})  # e.g. the pool's TORCH_CUDA_ARCH_LIST, before any Judge starts a child
        self.config = config_from_dict(config)
        self.recycle_after = recycle_after
        self.name = name or f"pid{os.getpid()}"
        self.judges = judges
        self._judges: OrderedDict[str, Any] = OrderedDict()  # task path -> Judge, most recent last
        self._counts: dict[str, int] = {}

    def run(self, task_path: str, candidate_path: str, source: str | None = None) -> dict[str, Any]:
        from warpforge.candidate import Candidate
        from warpforge.evaluate import Judge
        from warpforge.task import load_task

        try:
            task = load_task(task_path)
            candidate = Candidate(source) if source is not None else Candidate.from_file(candidate_path)
            judge = self._judges.get(task_path)
            if judge is None:
                while len(self._judges) >= self.judges:
                    self._drop(next(iter(self._judges)))
                judge = self._judges[task_path] = Judge(task, self.config)
                self._counts[task_path] = 0
            self._judges.move_to_end(task_path)
            result = judge.evaluate(candidate).to_dict(samples=False)
        except WarpforgeError as exc:  # a broken task or an unreadable candidate: a result, not a crash
            self._drop(task_path)
            result = {"status": "error", "correct": False, "reason": str(exc), "stage": "load"}
        cuda_error = "cuda" in str(result.get("reason", "")).lower() and result.get("status") in ("crashed", "runtime_error")
        if task_path in self._judges:
            self._counts[task_path] += 1
            if self._counts[task_path] >= self.recycle_after or cuda_error:
                self._drop(task_path)
        if cuda_error:  # the GPU may be left in a bad state: start every task afresh
            self.close()
        result.update(task=task_path, candidate=candidate_path, worker=self.name)
        return result

    def _drop(self, task_path: str) -> None:
        judge = self._judges.pop(task_path, None)
        if judge is not None:
            judge.close()

    def close(self) -> None:
        for task_path in list(self._judges):
            self._drop(task_path)


def _local_worker_main(conn: Any, config: dict[str, Any], env: dict[str, str], name: str, recycle_after: int) -> None:
    os.environ.update(env)  # before torch is imported here: CUDA_VISIBLE_DEVICES pins the GPU
    worker = EvalWorker(config, recycle_after, name)
    try:
        while True:
            job = conn.recv()
            if job is None:
                break
            conn.send(worker.run(*job))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        worker.close()


class Slot(Protocol):
    name: str
    restarts: int
    busy: threading.Event

    def run(self, job: Job) -> dict[str, Any]: ...
    def restart(self) -> None: ...
    def close(self) -> None: ...


class LocalSlot:
    """One worker process (spawned: a fresh interpreter, so the pinning env applies to CUDA)."""

    def __init__(self, name: str, config: dict[str, Any], env: dict[str, str], recycle_after: int = 50) -> None:
        self.name, self.config, self.env, self.recycle_after = name, config, env, recycle_after
        self.busy = threading.Event()
        self.restarts = 0
        self.jobs = 0
        self._start()

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_local_worker_main, args=(child, self.config, self.env, self.name, self.recycle_after),
                                name=f"warpforge-{self.name}", daemon=True)
        self.proc.start()
        child.close()

    def run(self, job: Job) -> dict[str, Any]:
        self.busy.set()
        try:
            self.conn.send((job.task, job.candidate, job.source))
            while not self.conn.poll(0.2):
                if not self.proc.is_alive():
                    raise WorkerLost(f"{self.name} exited with code {self.proc.exitcode}")
            result: dict[str, Any] = self.conn.recv()
            self.jobs += 1
            return result
        except (EOFError, OSError, BrokenPipeError) as exc:
            raise WorkerLost(f"{self.name}: {exc}") from None
        finally:
            self.busy.clear()

    def restart(self) -> None:
        self.close()
        self.restarts += 1
        self._start()

    def close(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self.conn.close()


class RaySlot:
    """One Ray actor running an EvalWorker (num_gpus=1 on CUDA: Ray pins the GPU)."""

    def __init__(self, name: str, config: dict[str, Any], device: str, recycle_after: int = 50,
                 env: dict[str, str] | None = None) -> None:
        import ray

        self.name, self.config, self.recycle_after, self.env = name, config, recycle_after, env or {}
        self._remote: Any = ray.remote(num_gpus=1 if device == "cuda" else 0, num_cpus=1, max_restarts=0)(EvalWorker)
        self.actor: Any = None
        self.busy = threading.Event()
        self.restarts = 0
        self._start()

    def _start(self) -> None:
        self.actor = self._remote.remote(self.config, self.recycle_after, self.name, self.env)

    def run(self, job: Job) -> dict[str, Any]:
        import ray
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        self.busy.set()
        try:
            result: dict[str, Any] = ray.get(self.actor.run.remote(job.task, job.candidate, job.source))
            return result
        except (RayActorError, ActorDiedError, ActorUnavailableError) as exc:
            raise WorkerLost(f"{self.name}: {type(exc).__name__}") from None
        finally:
            self.busy.clear()

    def restart(self) -> None:
        self.close()
        self.restarts += 1
        self._start()

    def close(self) -> None:
        import ray

        try:
            ray.get(self.actor.close.remote(), timeout=30)
        except Exception:  # already dead
            pass
        ray.kill(self.actor)


def run_jobs(jobs: Sequence[Job], slots: Sequence[Slot], on_result: Callable[[Job, dict[str, Any]], None] | None = None,
             retries: int = 2) -> list[dict[str, Any]]:
    """Run every job on the given slots (which stay open); results in job order, one per job."""
    pool = EvalPool.from_slots(list(slots), retries)
    try:
        return pool.map(jobs, on_result)
    finally:
        pool.stop()


def local_slots(config: EvalConfig, workers: int | None = None, recycle_after: int = 50,
                env: dict[str, str] | None = None) -> list[Slot]:
    """One worker per visible GPU on CUDA (each pinned to its GPU); on the CPU one when timing,
    a few (half the cores, up to 4) for correctness-only batches. `env` is added to each worker's."""
    cfg = config.resolved()
    data = cfg.to_dict()
    if cfg.device == "cuda":
        import torch

        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else [str(i) for i in range(torch.cuda.device_count())]
        ids = ids[:workers] if workers else ids
        return [LocalSlot(f"gpu{gid}", data, {**(env or {}), "CUDA_VISIBLE_DEVICES": gid}, recycle_after) for gid in ids]
    # CPU workers share the cores: with timing on, one at a time unless asked (contended timings
    # are not honest, and the evaluator's cache checks can misfire on them); checks only, a few
    n = workers or (1 if cfg.bench else max(1, min(4, (os.cpu_count() or 2) // 2)))
    return [LocalSlot(f"cpu{i}", data, dict(env or {}), recycle_after) for i in range(n)]


def ray_slots(config: EvalConfig, workers: int | None = None, address: str | None = None, recycle_after: int = 50,
              env: dict[str, str] | None = None) -> list[Slot]:
    """Workers as Ray actors: one per GPU of the cluster on CUDA, one per two CPUs otherwise."""
    _ray_init(address)
    import ray

    cfg = config.resolved()
    resources = ray.cluster_resources()
    if cfg.device == "cuda":
        n = workers or int(resources.get("GPU", 0))
        if n < 1:
            raise UsageError("the Ray cluster has no GPUs: use --device cpu, or add GPU nodes")
    else:
        n = workers or max(1, int(resources.get("CPU", 2)) // 2)
    return [RaySlot(f"ray{i}", cfg.to_dict(), cfg.device or "cpu", recycle_after, env) for i in range(n)]


def _ray_init(address: str | None) -> None:
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray: pip install 'warpforge[ray]'") from None
    if not ray.is_initialized():  # warpforge must be installed on every node of a remote cluster
        ray.init(address=address, include_dashboard=False, log_to_driver=False)


def _needs_build(source: str) -> bool:
    from warpforge.evaluate import needs_build

    return needs_build(source)


def _precompile_job(source: str, config: dict[str, Any], arch: str) -> dict[str, Any]:
    from warpforge.evaluate import precompile

    return precompile(source, config_from_dict(config), arch)


class Compiler:
    """The compile pool: builds candidates' extensions on CPUs (a thread each driving a sandboxed
    compile child, or Ray tasks with num_cpus=1) while the GPU workers time other candidates.
    The builds land in the shared compile cache (config.cache_dir: give Ray nodes a shared
    directory), so the GPU worker's own import of the candidate finds them warm."""

    def __init__(self, config: EvalConfig, arch: str, workers: int, executor: str = "local") -> None:
        self.config, self.arch, self.workers, self.executor = config.resolved(), arch, workers, executor
        self._threads: ThreadPoolExecutor | None = None
        self._remote: Any = None
        if executor == "ray":
            import ray

            self._remote = ray.remote(num_cpus=1, max_retries=2)(_precompile_job)
        else:
            self._threads = ThreadPoolExecutor(workers, thread_name_prefix="warpforge-compile")

    def submit(self, source: str) -> Future[dict[str, Any]]:
        if self._threads is not None:
            from warpforge.evaluate import precompile

            return self._threads.submit(precompile, source, self.config, self.arch)
        future: Future[dict[str, Any]] = self._remote.remote(source, self.config.to_dict(), self.arch).future()
        return future

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=True)


def default_compile_workers(gpus: int) -> int:
    """Half of the cores the GPU workers leave, at least one."""
    return max(1, ((os.cpu_count() or 2) - gpus) // 2)


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
        arch = ""
        if cfg.device == "cuda" and compile_workers != 0:
            from warpforge.evaluate.hardware import visible_gpu_arch

            arch = os.environ.get("TORCH_CUDA_ARCH_LIST") or visible_gpu_arch()
        env = {"TORCH_CUDA_ARCH_LIST": arch} if arch else {}
        if executor == "local":
            slots = local_slots(config, workers, env=env)
        else:
            slots = ray_slots(config, workers, ray_address, env=env)
        compiler = None
        if arch:
            n = compile_workers if compile_workers is not None else default_compile_workers(len(slots))
            compiler = Compiler(cfg, arch, n, executor)
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
        self._compiling: set[Future[dict[str, Any]]] = set()
        self._precompiled: dict[Future[dict[str, Any]], dict[str, Any]] = {}  # job future -> its compile job
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[Job, int, Future[dict[str, Any]]] | None] = queue.Queue()
        self._threads = [threading.Thread(target=self._serve, args=(s,), name=f"executor-{s.name}", daemon=True)
                         for s in slots]
        for t in self._threads:
            t.start()

    def _serve(self, slot: Slot) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            job, attempt, future = item
            try:
                result = slot.run(job)
            except WorkerLost as exc:
                slot.restart()
                if attempt < self.retries:
                    self._queue.put((job, attempt + 1, future))
                    continue
                result = {"status": "crashed", "correct": False, "stage": "executor",
                          "reason": f"its worker died {attempt + 1} times ({exc})",
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
        if self.compiler is None or source is None or not _needs_build(source):
            self._queue.put((job, 0, future))
            return future
        compiled = self.compiler.submit(source)
        with self._lock:
            self._compiling.add(compiled)

        def queue_it(done: Future[dict[str, Any]]) -> None:
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
        for _ in self._threads:
            self._queue.put(None)
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
