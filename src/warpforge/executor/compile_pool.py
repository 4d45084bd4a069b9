"""The compile pool: candidates that build C++/CUDA extensions are built on CPUs, in sandboxed
compile-only children that see no GPU (or Ray tasks), while the GPU workers time others. It
fills the shared compile cache; it never gives a verdict.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from warpforge.candidate import Precompiled
from warpforge.config import EvalConfig
from warpforge.languages import needs_build
from warpforge.target import Target

__all__ = ["Compiler", "default_compile_workers", "needs_build"]


def _precompile_job(source: str, config: dict[str, Any], target: Target) -> Precompiled:
    from warpforge.evaluate import precompile

    return precompile(source, EvalConfig.from_dict(config), target)


class Compiler:
    """The compile pool: builds candidates' extensions on CPUs (a thread each driving a sandboxed
    compile child, or Ray tasks with num_cpus=1) while the GPU workers time other candidates.
    The builds land in the shared compile cache (config.transport.cache_dir: give Ray nodes a shared
    directory), so the GPU worker's own import of the candidate finds them warm."""

    def __init__(self, config: EvalConfig, target: Target, workers: int, executor: str = "local") -> None:
        self.config, self.target, self.workers, self.executor = config.resolved(), target, workers, executor
        self._threads: ThreadPoolExecutor | None = None
        self._remote: Any = None
        if executor == "ray":
            import ray

            self._remote = ray.remote(num_cpus=1, max_retries=2)(_precompile_job)
        else:
            self._threads = ThreadPoolExecutor(workers, thread_name_prefix="warpforge-compile")

    def submit(self, source: str) -> Future[Precompiled]:
        if self._threads is not None:
            from warpforge.evaluate import precompile

            return self._threads.submit(precompile, source, self.config, self.target)
        future: Future[Precompiled] = self._remote.remote(source, self.config.to_dict(), self.target).future()
        return future

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=True)


def default_compile_workers(gpus: int) -> int:
    """Half of the cores the GPU workers leave, at least one."""
    return max(1, ((os.cpu_count() or 2) - gpus) // 2)
