"""How the evaluator's child processes are started: the allow-listed environment, the sandbox
around them and the limits they run under (time, host memory, folder size). Judge, the
reference process's handle (reference_client.py), a candidate's session (session.py) and the
compile-only children of `precompile` all start theirs with these."""

from __future__ import annotations

import os
from pathlib import Path

from warpforge import languages
from warpforge.config import EvalConfig
from warpforge.evaluate import jail, leftovers
from warpforge.target import build_target


def reference_memory_mb(cfg: EvalConfig) -> float:
    """The reference process's host-memory limit: four times `mem_limit_gb` (at least 8 GB), or
    half the machine's memory when that is more. It holds every input set and its float64 outputs
    in host memory when they do not fit the GPU (KernelBench's 2025 sizes: 19 GB a set)."""
    try:
        machine_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError, AttributeError):
        machine_mb = 0.0
    return max(max(cfg.limits.mem_limit_gb, 8) * 1024 * 4, machine_mb / 2)


def candidate_memory_mb(cfg: EvalConfig, workdir: Path) -> float:
    """The candidate process's host-memory limit: `mem_limit_gb`, plus twice its input file (it
    reads every input set into host memory before moving it to the GPU; a KernelBench task's
    sets can take more than the limit itself)."""
    try:
        inputs = (workdir / "inputs.pt").stat().st_size
    except OSError:
        inputs = 0
    return cfg.limits.mem_limit_gb * 1024 + 2 * inputs / 2**20


def free_gb(path: str) -> float:
    """Free space under `path` in GiB; 0 where this process cannot write."""
    try:
        st = os.statvfs(path)
    except OSError:
        return 0.0
    return st.f_bavail * st.f_frsize / 2**30 if os.access(path, os.W_OK) else 0.0


def folder_limit(cfg: EvalConfig, folders: list[Path], outputs_bytes: int = 0) -> leftovers.FolderLimit:
    """What watches a candidate's folders while it runs (from now: what they hold is the harness's)."""
    return leftovers.FolderLimit(folders, int(cfg.limits.work_limit_gb * 2**30), outputs_bytes,
                                 "EvalConfig.work_limit_gb or $WARPFORGE_WORK_LIMIT_GB raises the limit")


def child_jail(cfg: EvalConfig, workdir: Path, cache: Path | None, hidden: tuple[str, ...] = ()) -> jail.Jail | None:
    """The sandbox of a candidate process (None with --no-sandbox), or of an untrusted task's
    reference process: its work folder and private compile cache (if any) writable, the shared
    caches hidden, /tmp and /dev/shm capped at its memory limit."""
    if not cfg.safety.sandbox:
        return None
    return jail.Jail(str(workdir), cache=str(cache or ""), hidden=(os.path.realpath(cfg.transport.cache_dir), *hidden),
                     tmp_bytes=int(min(cfg.limits.mem_limit_gb, 4) * 2**30))


# glibc's malloc on the CPU, the same fixed settings in the reference and the candidate process.
# By default glibc serves a buffer above its mmap threshold with a fresh mmap (page faults and
# the kernel's zeroing inside the timed call) and raises that threshold (up to 32 MiB) and the
# trim threshold as the process frees such buffers, so whether a 128 KiB-32 MiB buffer costs
# page faults depends on the process's allocation history: an A/A mse_loss (2 MiB buffers)
# read 1.9x, 513 minor faults per call in the reference process and 0 in the candidate's.
# Fixed: buffers up to 32 MiB (glibc's largest threshold) come from the heap, which is never
# trimmed, so neither process faults on them after warm-up; larger ones are fresh mmaps in both.
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1099511627776"


def child_env(cfg: EvalConfig) -> dict[str, str]:
    """The children's allow-listed environment (no keys or tokens); a candidate's own
    compile-cache folders come in its spec."""
    env = jail.environment()
    env.update(languages.env(build_target(str(cfg.device))))  # a language's own (Triton's interpreter on the CPU)
    if cfg.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
        threads = str(cfg.cpu_threads or 1)  # the same count for the reference and the candidate
        env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
        env["GLIBC_TUNABLES"] = MALLOC_TUNABLES  # the same allocator behaviour in both (see MALLOC_TUNABLES)
    return env
