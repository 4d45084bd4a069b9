"""How long a device-wide synchronize's round trip takes, by how long the host waited and by the
CUDA context's scheduling mode (issue 19: the A/A error of tasks of 0.1-1 ms).

For each mode (the default, spin, yield, blocking sync), in a fresh process that sets the primary
context's flags before torch starts CUDA, a kernel of each length runs on the current stream, then:
a mark on the stream, a device-wide synchronize, an end event -- as bench.time_calls does for an
untrusted call. The tail is mark -> end in device time: nothing but the host's round trip.

    python lab/sync_tail_probe.py --out DIR     # on a GPU machine; writes DIR/sync_tail.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
from pathlib import Path

MODES = {"default": None, "spin": 1, "yield": 2, "blocking": 4}  # CU_CTX_SCHED_*
LENGTHS_MS = [0.0, 0.02, 0.1, 0.3, 1.0, 3.0, 10.0]
# variants of the default mode: the work a real task does (HBM copies, not a sleeping kernel);
# the same with a second idle process holding a context on the GPU; bench.time_calls itself
VARIANTS = ["default", "spin", "yield", "blocking", "copy", "copy+idle_process", "time_calls"]


def set_flags(flags: int) -> str:
    cuda = ctypes.CDLL("libcuda.so.1")
    dev = ctypes.c_int()
    assert cuda.cuInit(0) == 0
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    fn = getattr(cuda, "cuDevicePrimaryCtxSetFlags_v2", None) or cuda.cuDevicePrimaryCtxSetFlags
    return str(fn(dev, flags))


def probe(mode: str, calls: int) -> dict:
    flags = MODES.get(mode)
    rc = set_flags(flags) if flags is not None else "-"
    import torch

    torch.cuda.init()
    if mode == "time_calls":
        return probe_time_calls(calls)
    idle = None
    if mode == "copy+idle_process":  # another process with a CUDA context, waiting on a pipe
        idle = subprocess.Popen([sys.executable, "-c", "import torch, sys; torch.zeros(1, device='cuda'); "
                                 "print('up', flush=True); sys.stdin.read()"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        idle.stdout.readline()
    x = torch.randn(1 << 20, device="cuda")
    a, b = torch.randn(64 << 20, device="cuda"), torch.empty(64 << 20, device="cuda")  # 256 MB each
    start_sleep = torch.cuda.Event(enable_timing=True)
    end_sleep = torch.cuda.Event(enable_timing=True)
    start_sleep.record()
    torch.cuda._sleep(1_000_000)
    end_sleep.record()
    torch.cuda.synchronize()
    cycles_per_ms = 1_000_000 / start_sleep.elapsed_time(end_sleep)
    out = {"mode": mode, "set_flags_rc": rc, "lengths": {}}
    for length in LENGTHS_MS:
        tails = []
        for _ in range(calls):
            torch.cuda.synchronize()
            if length and mode.startswith("copy"):
                for _ in range(max(1, round(length / 0.2))):  # ~0.2 ms per 256 MB copy on an H100
                    b.copy_(a)
            elif length:
                torch.cuda._sleep(int(length * cycles_per_ms))
            else:
                x.add_(1.0)
            mark, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            mark.record()
            torch.cuda.synchronize()
            end.record()
            end.synchronize()
            tails.append(mark.elapsed_time(end) * 1000)
        q = statistics.quantiles(tails, n=10)
        out["lengths"][str(length)] = {"median_us": statistics.median(tails), "p10_us": q[0], "p90_us": q[-1],
                                       "min_us": min(tails)}
    if idle is not None:
        idle.kill()
    return out


def probe_time_calls(calls: int) -> dict:
    """bench.time_calls on HBM copies of several lengths: its tail median and sync floor."""
    import torch

    from warpforge.evaluate import bench

    a = torch.randn(64 << 20, device="cuda")
    out = {"mode": "time_calls", "lengths": {}}
    for copies in (1, 5, 50):
        def call(args, copies=copies):
            y = torch.empty_like(args[0])
            for _ in range(copies):
                y.copy_(args[0])
            return y

        s = bench.time_calls(call, lambda i: [a], 1, "cuda", min_reps=calls, max_reps=calls, rep_ms=1e9)
        out["lengths"][f"{copies}copies={s.median_ms:.2f}ms"] = {
            "median_us": (s.tail_median_ms or 0.0) * 1000, "p10_us": 0.0, "p90_us": 0.0, "min_us": 0.0,
            "floor_us": (s.sync_floor_ms or 0.0) * 1000}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--mode", choices=VARIANTS, help="(internal) probe one variant in this process")
    args = ap.parse_args()
    if args.mode:
        print(json.dumps(probe(args.mode, args.calls)))
        return
    results = []
    for mode in VARIANTS:
        proc = subprocess.run([sys.executable, __file__, "--mode", mode, "--calls", str(args.calls)],
                              capture_output=True, text=True, check=False)
        if proc.returncode:
            results.append({"mode": mode, "error": proc.stderr[-2000:]})
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(row)
        print(mode, " ".join(f"{k}ms:{v['median_us']:.1f}({v['p10_us']:.0f}-{v['p90_us']:.0f})"
                             for k, v in row["lengths"].items()), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sync_tail.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
