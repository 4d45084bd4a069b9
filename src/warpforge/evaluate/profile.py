"""Which kinds of kernels a candidate actually ran: its own (CUDA, Triton, C++) or library
and PyTorch ones. Results then separate "custom kernel" from "PyTorch rewrite".

CUDA: one call under torch.profiler; each GPU kernel is matched against the kernel names the
languages found in the candidate's source (static.py), library name patterns, and the patterns
of kernels a language's runtime launches itself (PyTorch's). CPU: one call under
sys.setprofile, counting calls into extension modules the candidate built and into its named
kernel functions (Triton's, run by the interpreter). It does not prove the custom kernel did the
useful work — only that it ran, and on CUDA how much of the GPU time it took.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any

import torch

from warpforge import languages

LIBRARY = re.compile(r"cublas|cutlass|gemm|gemv|nvjet|xmma|cudnn|sm\d\d_|ampere_|hopper_|fft|splitK|cusparse|flash", re.I)


def classify(name: str, custom_names: list[str]) -> str:
    if any(re.search(rf"\b{re.escape(k)}\b", name) for k in custom_names):
        return "custom"
    if LIBRARY.search(name):
        return "library"
    runtime = languages.profile_pattern()  # (PyTorch's ATen and Inductor kernels)
    if runtime and re.search(runtime, name, re.I):
        return "pytorch"
    return "other"


def kernels_launched(run: Callable[[], Any], device: str, custom_names: list[str],
                     module_dirs: list[str]) -> dict[str, Any]:
    """`module_dirs`: the folders whose subfolders are extension modules the candidate built
    (languages.Toolchain.modules: torch's extensions folder)."""
    if device == "cuda":
        return _cuda_kernels(run, custom_names)
    return _cpu_calls(run, custom_names, module_dirs)


def _cuda_kernels(run: Callable[[], Any], custom_names: list[str]) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    run()  # compile and autotune outside the profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    times: dict[str, float] = {}
    for event in prof.key_averages():
        us = float(getattr(event, "self_device_time_total", 0.0) or getattr(event, "self_cuda_time_total", 0.0) or 0.0)
        if us > 0:
            times[event.key] = times.get(event.key, 0.0) + us
    return _summary(times, custom_names)


def _cpu_calls(run: Callable[[], Any], custom_names: list[str], module_dirs: list[str]) -> dict[str, Any]:
    counts: dict[str, float] = {}
    wanted = set(custom_names)
    built = {name for folder in module_dirs if folder and os.path.isdir(folder) for name in os.listdir(folder)}

    def tracer(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            # load_inline does not register its modules in sys.modules; a pybind11 function's
            # __module__ is the extension's name, which is a folder of the extensions cache
            module = getattr(arg, "__module__", None) or ""
            if module in built:
                name = f"{module}.{getattr(arg, '__name__', '?')}"
                counts[name] = counts.get(name, 0) + 1
        elif event == "call" and frame.f_code.co_name in wanted:
            counts[frame.f_code.co_name] = counts.get(frame.f_code.co_name, 0) + 1

    old = sys.getprofile()
    sys.setprofile(tracer)
    try:
        run()
    finally:
        sys.setprofile(old)
    custom = sorted(counts)
    return {"custom": custom, "library": [], "pytorch": [], "other": [], "custom_time_fraction": None,
            "kind": "custom_kernel" if custom else "pytorch_rewrite", "method": "python call trace (CPU)"}


def _summary(times: dict[str, float], custom_names: list[str]) -> dict[str, Any]:
    groups: dict[str, list[str]] = {"custom": [], "library": [], "pytorch": [], "other": []}
    spent = dict.fromkeys(groups, 0.0)
    for name, us in sorted(times.items(), key=lambda kv: -kv[1]):
        kind = classify(name, custom_names)
        groups[kind].append(name[:120])
        spent[kind] += us
    total = sum(spent.values())
    fraction = spent["custom"] / total if total else 0.0
    return {**groups, "custom_time_fraction": fraction,
            "kind": "custom_kernel" if groups["custom"] else "pytorch_rewrite", "method": "torch.profiler (CUDA)"}
