"""C and C++ code in a candidate's strings: what the three languages written in it (cuda, nvrtc,
cpp) share. Its pre-filter rules, its kernels' names, and torch's extension toolchain
(load_inline). Not a language itself."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from warpforge.languages.base import SourceView, Toolchain

# patterns in the C++/CUDA source strings -> why (evaluate/static.py reads them through each
# language's Rules)
RULES = {
    # the timer's device-wide sync counts a side stream's work except what fits in the round trip taken
    # off each call (see torch.cuda.Stream in static.FORBIDDEN_ATTRS)
    r"\bcudaStreamCreate": "side streams hide work from the timer",
    r"\bcuStreamCreate": "side streams hide work from the timer",
    # a native thread has no Python object: the run-time check only counts the process's threads
    # (PyTorch and Triton start their own), so behaviour cannot tell the candidate's apart
    r"\bstd::thread\b|\bpthread_create\b|\bstd::async\b": "background threads can hide work from the timer",
    # the sandbox contains processes, files and the network: refused early, with a reason a model can act on
    r"\b(?:v?fork|exec[lv]\w*|posix_spawnp?|popen|system)\s*\(": "starting processes",
    r"\b(?:f?open|freopen|fdopen|openat|creat|mmap)\s*\(|\b(?:std::)?(?:basic_)?[io]?fstream\b|\bfilebuf\b"
    r"|std::filesystem|<fstream>": "reading or writing files",
    r"\b(?:socket|connect|getaddrinfo|gethostbyname)\s*\(": "using the network",
    # in-process: a loaded library's functions and raw system calls reach the harness's memory, as
    # ctypes' CDLL would (static.CTYPES_FORBIDDEN)
    r"\bdl(?:m?open|sym)\b": "loading libraries at run time",
    r"\bsyscall\b": "raw system calls",
    # timing only: data pinned in L2 survives the flush before each timed call, and no output shows it
    r"\bcudaCtxResetPersistingL2Cache|cudaLimitPersistingL2CacheSize|accessPolicyWindow": "pinning data in L2 defeats the cache flush",
}

GLOBAL_KERNEL = re.compile(r"__global__\s+\w[\w\s:<>,*]*?\b(\w+)\s*\(")
# a kernel's attributes with arguments, before its name: `__launch_bounds__(T, 2)`, `__cluster_dims__(2, 1, 1)`
# (KernelBench level1/38's best in issue 22 was named `__cluster_dims__` and counted as a PyTorch
# rewrite), `__maxnreg__(64)`, `__attribute__((aligned(16)))`; their parentheses nest (strip_attributes)
KERNEL_ATTRIBUTE = re.compile(r"\b__(?:launch_bounds|cluster_dims|maxnreg|attribute)__\s*\(")
# comments, for naming kernels only: `__launch_bounds__(T, 2)  // a note` before the name hid it
# (the rules read the source as written, where a `//` inside a string cannot hide code)
C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
EXTENSION_BUILD = ("load_inline", "cpp_extension")
CUDA_SOURCES = ("cuda_sources", "__global__")

# torch.utils.cpp_extension's builds (TORCH_EXTENSIONS_DIR/<name>/: ninja's files, the sources
# load_inline writes, objects, the library)
TORCH_EXTENSIONS = Toolchain(
    "TORCH_EXTENSIONS_DIR", "torch_extensions",
    (".so", ".o", ".ninja", ".ninja_log", ".ninja_deps", ".cpp", ".cu", ".cuh", ".c", ".cc", ".h", ".hpp"),
    depth=3, per_source=True, modules=True)


def strip_attributes(text: str) -> str:
    """`text` with each KERNEL_ATTRIBUTE and its balanced parenthesised arguments blanked out."""
    out, pos = [], 0
    while (m := KERNEL_ATTRIBUTE.search(text, pos)) is not None:
        depth, end = 1, m.end()
        while end < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        out += [text[pos:m.start()], " "]
        pos = end
    return "".join(out) + text[pos:]


def kernel_names(view: SourceView) -> set[str]:
    """The `__global__` functions of the source's C and C++ strings."""
    return set(GLOBAL_KERNEL.findall(strip_attributes(C_COMMENT.sub(" ", view.native))))


def count_kernels(source: str) -> int:
    """`__global__` functions, else the extension's entry points (a C++ build has no kernels as such)."""
    return len(re.findall(r"__global__", source)) or len(re.findall(r"\bPYBIND11_MODULE|functions\s*=", source))


def builds_extension(source: str) -> bool:
    return any(marker in source for marker in EXTENSION_BUILD)


def has_cuda_sources(source: str) -> bool:
    return any(marker in source for marker in CUDA_SOURCES)


def nvcc_version() -> str:
    """nvcc's version line ("Build cuda_12.4.r12.4/compiler.34097967_0"), "" without nvcc."""
    nvcc = shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc") if "CUDA_HOME" in os.environ else None)
    if not nvcc or not os.path.exists(nvcc):
        return ""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return "nvcc?"
    return out.strip().splitlines()[-1] if out.strip() else "nvcc"
