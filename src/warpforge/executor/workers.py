"""Executor workers: `EvalWorker` evaluates jobs one after another in one long-lived process,
through a `Judge` per recent task; a *slot* is the driver's handle on one such worker, a spawned
local process pinned to a GPU (`LocalSlot`) or a Ray actor (`RaySlot`). The pool that feeds them
is in `executor/__init__.py`. A local worker keeps its temporary files under a root of its own
(WARPFORGE_TMP_ROOT), which the driver removes when the worker dies or closes; the driver is a
child subreaper and kills what a dead worker's candidates left running.
"""

from __future__ import annotations

import atexit
import dataclasses
import multiprocessing as mp
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from warpforge.config import EvalConfig
from warpforge.evaluate.leftovers import remove_tree
from warpforge.evaluator import LocalEvaluator
from warpforge.errors import HarnessError, UsageError, WarpforgeError, WorkerLost


@dataclass(frozen=True)
class Job:
    index: int
    task: str
    candidate: str
    """A candidate file's path, or a label when `source` is given."""
    source: str | None = None
    """The candidate's source text (no file needed on the worker's machine)."""
    untrusted_task: bool = False
    """The task file did not come from the operator: its program runs in the sandbox (Task.untrusted)."""


TMP_ROOT_ENV = "WARPFORGE_TMP_ROOT"
"""The folder under which a local worker's Judges make their temporary folders."""


class EvalWorker:
    """Evaluates jobs in this process through a `LocalEvaluator` (evaluator.py), which keeps a
    Judge for each of the last `judges` tasks (jobs of several tasks interleave, e.g. when the
    compile pool finishes them out of order). A task's Judge is recycled after `recycle_after`
    evaluations, and every Judge after a CUDA error (the GPU may be left in a bad state)."""

    def __init__(self, config: dict[str, Any], recycle_after: int = 50, name: str = "",
                 env: dict[str, str] | None = None, judges: int = 4) -> None:
        os.environ.update(env or {})  # e.g. the pool's TORCH_CUDA_ARCH_LIST, before any Judge starts a child
        self.config = EvalConfig.from_dict(config)
        self.name = name or f"pid{os.getpid()}"
        self.evaluator = LocalEvaluator(self.config, judges, recycle_after)

    def run(self, task_path: str, candidate_path: str, source: str | None = None,
            untrusted_task: bool = False) -> dict[str, Any]:
        from warpforge.candidate import Candidate
        from warpforge.task import load_task

        try:
            task = dataclasses.replace(load_task(task_path), untrusted=untrusted_task)
            candidate = Candidate(source) if source is not None else Candidate.from_file(candidate_path)
            # the whole record, samples too: the archive keeps them
            result = self.evaluator.evaluate(task, candidate).to_dict()
        except HarnessError as exc:  # the harness's own reference process failed (out of memory, say)
            result = {"status": "crashed", "correct": False, "reason": str(exc), "stage": "reference"}
        except WarpforgeError as exc:  # a broken task or an unreadable candidate: a result, not a crash
            result = {"status": "task_error", "correct": False, "reason": str(exc), "stage": "load"}
        except Exception as exc:  # the harness's own bug: this job's result, never the next job's (its Judges go)
            self.close()
            result = {"status": "crashed", "correct": False, "stage": "reference",
                      "reason": f"the harness itself failed (a warpforge error, not the candidate's; please report it): "
                                f"{type(exc).__name__}: {str(exc)[:300]}"}
        cuda_error = "cuda" in str(result.get("reason", "")).lower() and result.get("status") in ("crashed", "runtime_error")
        if cuda_error:  # the GPU may be left in a bad state: start every task afresh
            self.close()
        result.update(task=task_path, candidate=candidate_path, worker=self.name)
        return result

    def close(self) -> None:
        self.evaluator.close()


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
        from warpforge.evaluate.sandbox import become_subreaper

        # a dead worker's orphans (candidates' daemons) re-parent to us, not to init, so close() can kill them
        become_subreaper()
        self.tmp_root = make_tmp_root(self.name)
        env = {**self.env, TMP_ROOT_ENV: str(self.tmp_root)}
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_local_worker_main, args=(child, self.config, env, self.name, self.recycle_after),
                                name=f"warpforge-{self.name}", daemon=True)
        self.proc.start()
        child.close()

    def run(self, job: Job) -> dict[str, Any]:
        self.busy.set()
        try:
            self.conn.send((job.task, job.candidate, job.source, job.untrusted_task))
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
        self._clean_up()

    def _clean_up(self) -> None:
        """After the worker is gone (closed, crashed or killed): kill what its candidates left running,
        then remove its temporary root, inputs and outputs in /dev/shm included."""
        from warpforge.evaluate.sandbox import reap_orphans

        if not self.proc.is_alive():  # else its processes are still its own, not orphans
            reap_orphans()
        remove_tree(self.tmp_root)  # (candidates' trees: iterative, never raises)
        _ROOTS.discard(self.tmp_root)


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
            result: dict[str, Any] = ray.get(self.actor.run.remote(job.task, job.candidate, job.source,
                                                                   job.untrusted_task))
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


_ROOTS: set[Path] = set()
"""Worker roots not removed yet: whatever a driver leaves unclosed goes when it exits."""


@atexit.register
def _remove_roots() -> None:
    for root in list(_ROOTS):
        remove_tree(root)


def make_tmp_root(name: str) -> Path:
    """A fresh temporary root for one local worker: on /dev/shm when it has room (GPU-sized inputs
    cross between processes as files there, as the Judge puts them), else in the system's temp folder."""
    base = "/dev/shm" if _free_gb("/dev/shm") > 16 else tempfile.gettempdir()
    root = Path(tempfile.mkdtemp(prefix=f"warpforge-pool-{os.getpid()}-{name}-", dir=base))
    _ROOTS.add(root)
    return root


def _free_gb(path: str) -> float:
    try:
        return shutil.disk_usage(path).free / 2**30
    except OSError:
        return 0.0


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
    return [LocalSlot(f"cpu{i}", data, {**cpu_threads(n), **(env or {})}, recycle_after) for i in range(n)]


def cpu_threads(workers: int) -> dict[str, str]:
    """Each CPU worker's share of the cores for torch's thread pools, as Ray gives its actors
    (OMP_NUM_THREADS = their CPUs): without it every worker's reference and candidate processes
    each start a thread per core, and on 2 cores with 2 workers a batch ran 1.25x slower than on
    Ray. A user's own OMP_NUM_THREADS wins."""
    if os.environ.get("OMP_NUM_THREADS"):
        return {}
    share = str(max(1, (os.cpu_count() or 1) // max(workers, 1)))
    return {"OMP_NUM_THREADS": share, "MKL_NUM_THREADS": share}


def ray_slots(config: EvalConfig, workers: int | None = None, address: str | None = None, recycle_after: int = 50,
              env: dict[str, str] | None = None) -> list[Slot]:
    """Workers as Ray actors: one per GPU of the cluster on CUDA, one per two CPUs otherwise."""
    ray_init(address)
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


def ray_init(address: str | None) -> None:
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray: pip install 'warpforge[ray]'") from None
    if not ray.is_initialized():  # warpforge must be installed on every node of a remote cluster
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
