"""Building the CUTLASS sm90 GEMMs (configurations in cutlass_configs.py, loaded by cutlass_sm90.py):
the CUDA source of one instance (kernels/cutlass_sm90.cu with its placeholders filled), the CUTLASS
headers it is compiled against (the nvidia-cutlass wheel's, or $WARPFORGE_CUTLASS_INCLUDE), and nvcc
turning it into a plain shared library, cached on disk under a name that changes with the source,
the flags and the headers' version; `build_all` prebuilds many in parallel, also into a folder to
carry to an offline GPU machine ($WARPFORGE_CUTLASS_LIB_DIR there). No GPU is needed for any of it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import importlib.util
import os
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from string import Template

from warpforge.errors import UsageError
from warpforge.gemm.cuda_mma import _first_errors, _nvcc
from warpforge.gemm.cutlass_configs import ELEMENTS, SCHEDULES, CutlassConfig
from warpforge.gemm.layout import LAYOUTS

# nvcc for CUTLASS 3.x: C++17, relaxed constexpr (CuTe calls constexpr host functions on the device),
# sm_90a (wgmma and setmaxnreg exist only in the arch-specific target), NDEBUG (no device asserts).
# cudart is linked statically (nvcc's default), so the library needs only the driver on the GPU machine.
NVCC_FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_90a,code=sm_90a",
              "--expt-relaxed-constexpr", "-DNDEBUG")

# One instance takes 30-115 s of nvcc on one core of a 2-core machine (docs/gemm.md); ten minutes means stuck.
COMPILE_TIMEOUT_S = 600


@functools.cache
def _template() -> Template:
    return Template(importlib.resources.files("warpforge.gemm").joinpath("kernels/cutlass_sm90.cu").read_text())


def source(cfg: CutlassConfig, dtype: str, layout: str) -> str:
    """The .cu text of one instance: the template with its placeholders filled."""
    if cfg.problem:
        raise UsageError(f"CUTLASS config {cfg.name} is invalid: {cfg.problem}")
    if dtype not in ELEMENTS:
        raise UsageError(f"dtype must be one of {', '.join(ELEMENTS)}, not {dtype!r}")
    if layout not in LAYOUTS:
        raise UsageError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    kernel, epilogue, scheduler = SCHEDULES[cfg.schedule]
    return _template().substitute(
        NAME=cfg.name, DTYPE=dtype, LAYOUT=layout, ELEMENT=ELEMENTS[dtype], B_KMAJOR=int(layout == "nt"),
        TILE_M=cfg.tile_m, TILE_N=cfg.tile_n, TILE_K=cfg.tile_k, CLUSTER_M=cfg.cluster_m, CLUSTER_N=cfg.cluster_n,
        KERNEL_SCHEDULE=kernel, EPILOGUE_SCHEDULE=epilogue, TILE_SCHEDULER=scheduler)


def include_dir() -> Path:
    """The folder holding cutlass/ and cute/: $WARPFORGE_CUTLASS_INCLUDE, else the one inside the
    installed nvidia-cutlass wheel (package cutlass_library, found without importing it)."""
    env = os.environ.get("WARPFORGE_CUTLASS_INCLUDE")
    if env:
        folder = Path(env)
        if not (folder / "cutlass" / "cutlass.h").is_file() or not (folder / "cute" / "tensor.hpp").is_file():
            raise UsageError(f"WARPFORGE_CUTLASS_INCLUDE={env} holds no cutlass/cutlass.h and cute/tensor.hpp: "
                             "point it at CUTLASS's include folder or unset it")
        return folder
    spec = importlib.util.find_spec("cutlass_library")
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(location) / "source" / "include"
        if (folder / "cutlass" / "cutlass.h").is_file():
            return folder
    raise UsageError("CUTLASS headers not found: pip install 'warpforge[gemm]' (the nvidia-cutlass wheel) "
                     "or set WARPFORGE_CUTLASS_INCLUDE to a folder holding cutlass/ and cute/")


def header_version() -> str:
    """CUTLASS's version as its headers state it ("4.2.0")."""
    text = (include_dir() / "cutlass" / "version.h").read_text()
    parts = [re.search(rf"#define CUTLASS_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) if m else "0" for m in parts)


def cache_dir() -> Path:
    """Where built libraries go: $WARPFORGE_CACHE (or ~/.cache/warpforge) /gemm/cutlass."""
    root = os.environ.get("WARPFORGE_CACHE") or str(Path.home() / ".cache" / "warpforge")
    return Path(root) / "gemm" / "cutlass"


def _stem(cfg: CutlassConfig, dtype: str, layout: str) -> str:
    """<name>_<dtype>_<layout>-<hash of the source and flags>: a changed template or flag is a new file."""
    digest = hashlib.sha256("\0".join([source(cfg, dtype, layout), *NVCC_FLAGS]).encode()).hexdigest()[:16]
    return f"{cfg.name}_{dtype}_{layout}-{digest}"


def library_name(cfg: CutlassConfig, dtype: str, layout: str) -> str:
    """The file name of a built instance; it ends with the CUTLASS version of the headers, so new headers rebuild."""
    return f"{_stem(cfg, dtype, layout)}-cutlass{header_version()}.so"


def find_built(cfg: CutlassConfig, dtype: str, layout: str) -> Path | None:
    """A built library for this instance: in $WARPFORGE_CUTLASS_LIB_DIR (libraries carried from
    another machine), then in the cache. Where no headers are installed (a GPU machine that only
    runs carried libraries) any CUTLASS version of the same source and flags will do."""
    folders = [Path(d) for d in (os.environ.get("WARPFORGE_CUTLASS_LIB_DIR"), str(cache_dir())) if d]
    try:
        exact: str | None = library_name(cfg, dtype, layout)
    except UsageError:
        exact = None
    for folder in folders:
        if exact:
            if (folder / exact).is_file():
                return folder / exact
        else:
            found = sorted(folder.glob(f"{_stem(cfg, dtype, layout)}-cutlass*.so"), key=lambda p: p.stat().st_mtime)
            if found:
                return found[-1]
    return None


def _run_nvcc(cfg: CutlassConfig, dtype: str, layout: str, out: Path, flags: tuple[str, ...] = NVCC_FLAGS) -> None:
    """nvcc on one instance's source into `out`; UsageError with nvcc's first errors if it fails."""
    nvcc, include = _nvcc(), include_dir()
    what = f"{cfg.name} ({dtype}, {layout}, sm_90a)"
    with tempfile.TemporaryDirectory(prefix="warpforge-cutlass-") as tmp:
        cu = Path(tmp) / f"{cfg.name}.cu"
        cu.write_text(source(cfg, dtype, layout))
        cmd = [nvcc, *flags, f"-I{include}", "-o", str(out), str(cu)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise UsageError(f"nvcc took more than {COMPILE_TIMEOUT_S} s on CUTLASS {what}") from None
    if proc.returncode != 0:
        log = (proc.stderr + proc.stdout).replace(str(cu), f"{cfg.name}.cu")  # not the deleted temp path
        raise UsageError(f"CUTLASS {what} does not compile:\n{_first_errors(log)}")


def compile_check(cfg: CutlassConfig, dtype: str, layout: str) -> None:
    """Compile one instance to an object file on the CPU; raises UsageError with nvcc's first errors."""
    with tempfile.TemporaryDirectory(prefix="warpforge-cutlass-obj-") as tmp:
        flags = ("-c", *(f for f in NVCC_FLAGS if f != "-shared"))
        _run_nvcc(cfg, dtype, layout, Path(tmp) / "instance.o", flags)


@dataclass(frozen=True)
class Built:
    """What `build_all` did for one instance: the library's path, or why it could not be built."""

    cfg: CutlassConfig
    dtype: str
    layout: str
    path: Path | None
    error: str | None
    seconds: float


_failed: dict[tuple[CutlassConfig, str, str], str] = {}  # builds that failed in this process: not retried


def build(cfg: CutlassConfig, dtype: str, layout: str, out_dir: Path | None = None) -> Path:
    """The library of one instance, built into `out_dir` (default: the cache) unless already there
    or in $WARPFORGE_CUTLASS_LIB_DIR. Written to a temporary name and renamed, so concurrent
    builders never see half a file. A failure is remembered: asking again raises at once."""
    key = (cfg, dtype, layout)
    if key in _failed:
        raise UsageError(_failed[key])
    found = find_built(cfg, dtype, layout) if out_dir is None else None
    if found:  # before naming a target, which needs the headers: a carried library is used without them
        return found
    target = (out_dir or cache_dir()) / library_name(cfg, dtype, layout)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        _run_nvcc(cfg, dtype, layout, partial)
        os.replace(partial, target)
    except UsageError as exc:
        _failed[key] = str(exc)
        raise
    finally:
        partial.unlink(missing_ok=True)
    return target


def build_all(instances: Iterable[tuple[CutlassConfig, str, str]], jobs: int | None = None,
              out_dir: Path | None = None, on_built: Callable[[Built], None] | None = None) -> list[Built]:
    """Build many (config, dtype, layout) instances, `jobs` nvcc processes at a time (default: one
    per CPU core); failures are returned, not raised. With `out_dir` the libraries go there, e.g.
    a folder to carry to an offline GPU machine and name in $WARPFORGE_CUTLASS_LIB_DIR. `on_built`
    hears of each instance as it finishes (a progress bar)."""

    def one(instance: tuple[CutlassConfig, str, str]) -> Built:
        started = time.perf_counter()
        try:
            path: Path | None = build(*instance, out_dir=out_dir)
            error = None
        except UsageError as exc:
            path, error = None, str(exc)
        built = Built(*instance, path, error, round(time.perf_counter() - started, 1))
        if on_built:
            on_built(built)
        return built

    todo = list(dict.fromkeys(instances))
    with ThreadPoolExecutor(max_workers=max(1, jobs or os.cpu_count() or 1)) as pool:
        return list(pool.map(one, todo))
