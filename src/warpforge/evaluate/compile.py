"""Compile caches and compile-error summaries.

Candidates compile themselves when imported (load_inline, Triton's JIT, CuPy's NVRTC); this
module points every one of those toolchains at a cache directory keyed by the source hash,
the toolchain versions and the GPU architecture, so a re-evaluation of the same source is
warm, and turns a wall of compiler output into the few lines an LLM needs to repair it.
A sandboxed candidate never writes the shared cache: it gets a private copy of its own key's
entry (`stage`), and the parent publishes what it built back under that key (`publish`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def toolchain_fingerprint() -> str:
    """nvcc, torch and triton versions; part of every cache key."""
    parts = []
    nvcc = shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc") if "CUDA_HOME" in os.environ else None)
    if nvcc and os.path.exists(nvcc):
        try:
            out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=20).stdout
            parts.append(out.strip().splitlines()[-1] if out.strip() else "nvcc")
        except (OSError, subprocess.SubprocessError):
            parts.append("nvcc?")
    try:
        import torch

        parts.append(f"torch {torch.__version__}")
    except ImportError:
        pass
    try:
        from importlib.metadata import version

        parts.append(f"triton {version('triton')}")
    except Exception:
        pass
    return "; ".join(parts)


def cache_key(source: str, arch: str) -> str:
    return hashlib.sha256(f"{source}\0{toolchain_fingerprint()}\0{arch}".encode()).hexdigest()[:20]


def private_env(root: str, arch: str) -> dict[str, str]:
    """Environment variables that send every toolchain's build products to one private folder."""
    env = {"TORCH_EXTENSIONS_DIR": f"{root}/torch_extensions", "TRITON_CACHE_DIR": f"{root}/triton",
           "CUPY_CACHE_DIR": f"{root}/cupy", "MAX_JOBS": os.environ.get("MAX_JOBS", str(min(os.cpu_count() or 1, 16)))}
    if arch:
        env["TORCH_CUDA_ARCH_LIST"] = arch
    return env


def stage(cache_dir: str, key: str, private: Path) -> dict[str, tuple[int, int]]:
    """Copy the shared cache's entry for `key` (if any) into a candidate's private cache folder and
    return what it holds (`snapshot`). A copy, not links: the candidate may write its folder,
    never the shared entry."""
    entry = Path(cache_dir) / "compile" / "sandboxed" / key
    if entry.is_dir():
        shutil.copytree(entry, private, symlinks=True, dirs_exist_ok=True)
    return snapshot(private)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Relative path -> (size, mtime in ns) of every file under `folder`."""
    found = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            found[os.path.relpath(path, folder)] = (st.st_size, st.st_mtime_ns)
    return found


def publish(cache_dir: str, key: str, private: Path, staged: dict[str, tuple[int, int]] | None = None) -> None:
    """Put what a finished candidate built under its own key (whole, replacing the old entry), for
    a later evaluation of the same source; nothing when it changed nothing of what `stage` gave it
    (a warm re-evaluation). Its process is dead: nothing writes the folder now."""
    if not private.is_dir() or not any(private.iterdir()) or folder_bytes(private) > PUBLISH_LIMIT_BYTES:
        return
    if staged is not None and snapshot(private) == staged:
        return
    entry = Path(cache_dir) / "compile" / "sandboxed" / key
    entry.parent.mkdir(parents=True, exist_ok=True)
    incoming = entry.with_name(f"{key}.{os.getpid()}.{id(private)}.tmp")
    old = entry.with_name(f"{key}.{os.getpid()}.{id(private)}.old")
    try:
        shutil.copytree(private, incoming, symlinks=True)
        if entry.exists():
            entry.rename(old)
        incoming.rename(entry)
    except OSError:  # another evaluation of the same source published first: keep its entry
        pass
    finally:
        shutil.rmtree(incoming, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


# A build folder larger than this is not kept: load_inline builds measure a few MB to tens of MB.
PUBLISH_LIMIT_BYTES = 1 << 30


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under `folder` (symlinks not followed)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def cache_env(cache_dir: str, source: str, arch: str) -> dict[str, str]:
    """Environment variables that send every toolchain's build products to the shared compile cache
    (unsandboxed candidates only: a sandboxed one writes a private copy, see `stage`)."""
    key = cache_key(source, arch)
    root = Path(cache_dir) / "compile"
    ext_dir = root / "torch_extensions" / key
    ext_dir.mkdir(parents=True, exist_ok=True)
    (root / "triton").mkdir(parents=True, exist_ok=True)
    (root / "cupy").mkdir(parents=True, exist_ok=True)
    env = {
        "TORCH_EXTENSIONS_DIR": str(ext_dir),
        "TRITON_CACHE_DIR": str(root / "triton"),
        "CUPY_CACHE_DIR": str(root / "cupy"),
        "MAX_JOBS": os.environ.get("MAX_JOBS", str(min(os.cpu_count() or 1, 16))),
    }
    if arch:
        env["TORCH_CUDA_ARCH_LIST"] = arch
    return env


_ERROR_LINE = re.compile(r"(error|Error|ERROR)[\s:]|undefined reference|fatal|Traceback|Exception|CompilationError")
_NOISE = re.compile(r"^\s*(\[\d+/\d+\]|ninja: build stopped|FAILED: |c\+\+ -MMD|/usr/.*nvcc .*-c |Emitting ninja|Building extension|Allowing ninja)")


def summarize_errors(log: str, max_lines: int = 12) -> str:
    """The first real error lines of a compiler or Python log, with one line of context each."""
    lines = [ln for ln in log.splitlines() if ln.strip() and not _NOISE.match(ln)]
    picked: list[str] = []
    for i, line in enumerate(lines):
        if _ERROR_LINE.search(line):
            for ln in lines[i: i + 2]:
                if ln not in picked:
                    picked.append(ln)
        if len(picked) >= max_lines:
            break
    tail = [ln for ln in lines[-4:] if ln not in picked]
    summary = picked[:max_lines] + (["..."] + tail if tail and picked else tail)
    return "\n".join(s[:300] for s in summary)
