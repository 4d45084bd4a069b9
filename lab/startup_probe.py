"""Where a candidate process's start-up goes: torch import and the profiler's CUPTI start, variants.

A candidate process (evaluate/worker.py) imports torch, creates a CUDA context and starts the
profiler once before it takes a candidate; eval_speed.py measured 14-16 s for that on an H100,
of which 6.5-7.8 s is the first `torch.profiler.profile(...).__enter__()`. This script times
variants, each in a fresh Python process, --reps times:
    ctx_then_profile   the worker's order: CUDA context, then the profiler (the baseline)
    profile_then_ctx   the profiler started before the first CUDA call
    eager_loading      the baseline with CUDA_MODULE_LOADING=EAGER (all kernels loaded up front)
    prepare_only       the baseline with only the profiler's prepare step timed apart from start
and the ten slowest imports of `import torch` (python -X importtime, cumulative).

Run on the GPU machine: python lab/startup_probe.py --out DIR [--reps 2]
It writes DIR/startup_probe_<YYYY-MM-DD>.json and prints one line per run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROBE = r"""
import json, sys, time
variant = sys.argv[1]
t = {}; t0 = time.perf_counter()
import torch
from torch.profiler import ProfilerActivity, profile
t["import_torch"] = time.perf_counter() - t0

def context():
    t0 = time.perf_counter()
    x = torch.ones(1024, device="cuda"); (x + 1).sum().item(); torch.cuda.synchronize()
    t["cuda_context"] = time.perf_counter() - t0
    return x

def profiled(x):
    p = profile(activities=[ProfilerActivity.CUDA])
    t0 = time.perf_counter()
    if variant == "prepare_only":
        p._prepare_trace() if hasattr(p, "_prepare_trace") else p.prepare_trace()
        t["profile_prepare"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        p._start_trace() if hasattr(p, "_start_trace") else p.start_trace()
        t["profile_start_after_prepare"] = time.perf_counter() - t0
    else:
        p.__enter__()
        t["profile_start"] = time.perf_counter() - t0
    if x is None:
        x = context()
    (x + 1).sum().item()
    t0 = time.perf_counter()
    p.__exit__(None, None, None)
    t["profile_stop"] = time.perf_counter() - t0
    return x

if variant == "profile_then_ctx":
    x = profiled(None)
else:
    x = profiled(context())
t0 = time.perf_counter()
with profile(activities=[ProfilerActivity.CUDA]):
    (x + 1).sum().item()
t["second_profile"] = time.perf_counter() - t0
print(json.dumps({k: round(v, 3) for k, v in t.items()}))
"""

VARIANTS = {"ctx_then_profile": {}, "profile_then_ctx": {}, "eager_loading": {"CUDA_MODULE_LOADING": "EAGER"},
            "prepare_only": {}}


def run_variant(name: str) -> dict[str, object]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PROBE, name], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **VARIANTS[name]})
    steps = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {"error": done.stderr[-500:]}
    return {"variant": name, **steps, "process_total": round(time.perf_counter() - t0, 3)}


def slowest_imports(n: int = 10) -> list[tuple[str, float]]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import torch"], capture_output=True, text=True,
                          timeout=300)
    rows = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((parts[2].rstrip(), int(parts[1]) / 1e6))
    return sorted(rows, key=lambda r: -r[1])[:n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    runs = []
    for _ in range(args.reps):
        for name in VARIANTS:
            runs.append(run_variant(name))
            print(json.dumps(runs[-1]), flush=True)
    imports = slowest_imports()
    for name, seconds in imports:
        print(f"import {seconds:7.3f} s cumulative  {name}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    date = datetime.date.today().isoformat()
    (out / f"startup_probe_{date}.json").write_text(json.dumps(
        {"date": date, "python": sys.version.split()[0], "runs": runs, "slowest_imports_s": imports}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
