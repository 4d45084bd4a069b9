"""Compile caches and compile-error summaries.

Candidates compile themselves when imported (load_inline, Triton's JIT, CuPy's NVRTC); this
module points every kernel language's toolchains (languages/) at a cache directory keyed by the
source hash, the toolchain versions and the target, so a re-evaluation of the same source is
warm, and turns a wall of compiler output into the few lines an LLM needs to repair it.
A sandboxed candidate never writes the shared cache: it gets a private copy of its own key's
entry (`stage`), and the parent publishes what its build made back under that key (`publish`):
build products only (an allow-list of what the toolchains write), never its other files.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import shutil
import stat
from pathlib import Path

from warpforge import languages
from warpforge.evaluate import leftovers
from warpforge.evaluate.leftovers import remove_tree
from warpforge.target import Target


def toolchain_fingerprint() -> str:
    """The kernel languages' toolchain versions (nvcc, torch, triton); part of every cache key."""
    return languages.fingerprint()


def cache_key(source: str, target: Target) -> str:
    return hashlib.sha256(f"{source}\0{toolchain_fingerprint()}\0{target.arch_list}".encode()).hexdigest()[:20]


def private_env(root: str, target: Target) -> dict[str, str]:
    """Environment variables that send every toolchain's build products to one private folder."""
    env = {tc.env_var: f"{root}/{tc.folder}" for tc in languages.toolchains()}
    env["MAX_JOBS"] = os.environ.get("MAX_JOBS", str(min(os.cpu_count() or 1, 16)))
    if target.arch_list:
        env["TORCH_CUDA_ARCH_LIST"] = target.arch_list
    return env


def stage(cache_dir: str, key: str, private: Path) -> dict[str, tuple[int, int]]:
    """Copy the build products of the shared cache's entry for `key` (if any) into a candidate's
    fresh private cache folder and return what it holds (`build_products`). A copy, not links: the
    candidate may write its folder, never the shared entry."""
    entry = Path(cache_dir) / "compile" / "sandboxed" / key
    _copy_products(entry, private, build_products(entry))
    return build_products(private)


# What a build writes into the toolchain folders of a private cache (compile.private_env): each
# toolchain's allow-list (languages.Toolchain: suffixes, depth). Nothing else of a candidate's cache
# is published: no other name, nothing deeper, no link, FIFO or device.
# A build folder larger than this is not kept: load_inline builds measure a few MB to tens of MB.
PUBLISH_LIMIT_BYTES = 1 << 30
PUBLISH_LIMIT_FILES = 5_000


def build_products(folder: Path) -> dict[str, tuple[int, int]]:
    """Relative path -> (size, mtime in ns) of the build products under `folder` (each toolchain's
    suffixes): regular files only, never deeper than its depth, never through a link. Bounded: the walk
    looks at 4 x PUBLISH_LIMIT_FILES entries at most (a folder holding more gives nothing)."""
    found: dict[str, tuple[int, int]] = {}
    tools = {tc.folder: tc for tc in languages.toolchains()}
    todo: list[tuple[str, ...]] = [(folder,) for folder in tools]
    seen = 0
    while todo:
        parts = todo.pop()
        try:
            with os.scandir(folder.joinpath(*parts)) as listing:
                entries = [(e.name, e.stat(follow_symlinks=False)) for e in itertools.islice(listing, 4 * PUBLISH_LIMIT_FILES)]
        except OSError:
            continue
        seen += len(entries)
        if seen > 4 * PUBLISH_LIMIT_FILES:  # junk beside the products: none of it is kept
            return {}
        depth, suffixes = tools[parts[0]].depth, tools[parts[0]].suffixes
        for name, info in entries:
            path = (*parts, name)
            if stat.S_ISDIR(info.st_mode) and len(path) < depth:
                todo.append(path)
            elif stat.S_ISREG(info.st_mode) and len(path) == depth and name.endswith(suffixes):
                found["/".join(path)] = (info.st_size, info.st_mtime_ns)
    return found


def publish(cache_dir: str, key: str, private: Path, staged: dict[str, tuple[int, int]] | None = None) -> None:
    """Put the build products of a finished candidate's successful build (`build_products`) under
    its own key (whole, replacing the old entry), for a later evaluation of the same source;
    nothing when they are what `stage` gave it (a warm re-evaluation), too many or too large. Its
    process is dead: nothing writes the folder now. Call it only after a build that succeeded."""
    products = build_products(private)
    if not products or products == staged or len(products) > PUBLISH_LIMIT_FILES \
            or sum(size for size, _ in products.values()) > PUBLISH_LIMIT_BYTES:
        return
    entry = Path(cache_dir) / "compile" / "sandboxed" / key
    entry.parent.mkdir(parents=True, exist_ok=True)
    incoming = entry.with_name(f"{key}.{os.getpid()}.{id(private)}.tmp")
    old = entry.with_name(f"{key}.{os.getpid()}.{id(private)}.old")
    try:
        _copy_products(private, incoming, products)
        if entry.exists():
            entry.rename(old)
        incoming.rename(entry)
    except OSError:  # another evaluation of the same source published first: keep its entry
        pass
    finally:
        remove_tree(incoming)
        remove_tree(old)


def _copy_products(source: Path, target: Path, products: dict[str, tuple[int, int]]) -> None:
    """Copy `products` (build_products of `source`) into `target`, each opened without following a
    link and only if still a regular file of the size listed, with its modification time (ninja
    decides what is up to date by it)."""
    target.mkdir(parents=True, exist_ok=True)
    for relative, (size, mtime_ns) in products.items():
        destination = target / relative
        try:
            with leftovers.regular_file(str(source / relative), size) as path, open(path, "rb") as src:
                destination.parent.mkdir(parents=True, exist_ok=True)
                with open(destination, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            os.chmod(destination, 0o755 if relative.endswith(".so") else 0o644)
            os.utime(destination, ns=(mtime_ns, mtime_ns))
        except OSError:
            continue


def cache_env(cache_dir: str, source: str, target: Target) -> dict[str, str]:
    """Environment variables that send every toolchain's build products to the shared compile cache
    (unsandboxed candidates only: a sandboxed one writes a private copy, see `stage`)."""
    key = cache_key(source, target)
    root = Path(cache_dir) / "compile"
    env = {}
    for tc in languages.toolchains():
        folder = root / tc.folder / key if tc.per_source else root / tc.folder
        folder.mkdir(parents=True, exist_ok=True)
        env[tc.env_var] = str(folder)
    env["MAX_JOBS"] = os.environ.get("MAX_JOBS", str(min(os.cpu_count() or 1, 16)))
    if target.arch_list:
        env["TORCH_CUDA_ARCH_LIST"] = target.arch_list
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
