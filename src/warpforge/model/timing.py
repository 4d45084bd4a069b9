"""Time attributed to modules: a few forwards under torch.profiler, each module's calls inside a
`record_function` range opened by a forward pre-hook and closed by a forward hook.

A module's time in one forward is the sum of its ranges' durations in that forward: on CUDA the
GPU time of the kernels launched inside them (`device_time_total`), on the CPU their wall time;
the forward's own time is one range around the whole call. Each is the minimum over the timed
forwards, not the median: on a shared machine time is only ever added to a range (preemption,
another process's cache traffic: a 64x64 matmul of a busy 2-core host read 20 us to 4 ms), and a
ranking wants each module's own cost (as timeit advises for the same reason). This apportions a forward among modules for ranking (profile.py); it is not a speed
claim, which only the evaluator's timing function makes (evaluate/bench.py). Profiler overhead
lands on every module alike, and on tiny CPU models it is a large part of each range.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
from torch import nn

RANGE = "wf{i}::{path}"
FORWARD = "<forward>"


def time_modules(model: nn.Module, args: list[Any], kwargs: dict[str, Any], device: str, paths: set[str],
                 iters: int = 5, warmup: int = 1) -> tuple[float, dict[str, float]]:
    """(forward ms, path -> ms per forward) for the modules at `paths`, minima over `iters` forwards."""
    names = {id(m): p for p, m in model.named_modules() if p in paths}
    threads = torch.get_num_threads()
    if device == "cpu":  # one thread, as the evaluator's default (--cpu-threads): on a busy machine a pool's
        torch.set_num_threads(1)  # threads wait on each other, and a 64x64 matmul read 4 ms instead of 20 us
    try:
        return _timed(model, args, kwargs, device, names, iters, warmup)
    finally:
        torch.set_num_threads(threads)


def _timed(model: nn.Module, args: list[Any], kwargs: dict[str, Any], device: str, names: dict[int, str],
           iters: int, warmup: int) -> tuple[float, dict[str, float]]:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    iteration = [0]
    open_ranges: list[Any] = []

    def before(module: nn.Module, margs: Any) -> None:
        path = names.get(id(module))
        if path is not None:
            rng = record_function(RANGE.format(i=iteration[0], path=path))
            rng.__enter__()
            open_ranges.append(rng)

    def after(module: nn.Module, margs: Any, output: Any) -> None:
        if id(module) in names and open_ranges:
            open_ranges.pop().__exit__(None, None, None)

    with torch.no_grad():
        for _ in range(warmup):
            model(*args, **kwargs)
        _sync(device)
        handles = [h for m in model.modules() if id(m) in names
                   for h in (m.register_forward_pre_hook(before), m.register_forward_hook(after))]
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        try:
            with profile(activities=activities) as prof:
                for i in range(iters):
                    iteration[0] = i
                    with record_function(RANGE.format(i=i, path=FORWARD)):
                        model(*args, **kwargs)
                    _sync(device)
        finally:
            for h in handles:
                h.remove()
    per_iteration: dict[str, list[float]] = defaultdict(lambda: [0.0] * iters)
    for event in prof.events():
        if not event.name.startswith("wf") or "::" not in event.name or event.device_type != DeviceType.CPU:
            continue
        head, _, path = event.name.partition("::")
        if not head[2:].isdigit():
            continue
        us = _device_us(event) if device == "cuda" else event.cpu_time_total
        per_iteration[path][int(head[2:])] += us / 1e3
    forward = min(per_iteration[FORWARD]) if FORWARD in per_iteration else float("nan")
    return forward, {p: min(v) for p, v in per_iteration.items() if p != FORWARD}


def _device_us(event: Any) -> float:
    """GPU time of the kernels launched inside a CPU range (the name changed in torch 2.4)."""
    value: Any = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0.0)
    return float(value or 0.0)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
