"""End-to-end turnaround of one evaluation, per compile path, with a cold and a warm cache.

What it measures: the wall-clock seconds of `warpforge.evaluate(...)` from the Python API (this
process has torch imported already, as a long-running search loop would) for one cheap task,
level1/relu at its GPU size, with one candidate per compile path:
    pytorch  examples/gpu/relu__torch.py    (no compilation)
    triton   examples/gpu/relu__triton.py   (Triton JIT)
    nvrtc    examples/gpu/relu__nvrtc.py    (CuPy RawModule / NVRTC)
    inline   examples/gpu/relu__cuda.py     (torch.utils.cpp_extension.load_inline: nvcc + g++)
Cold: EvalConfig.of(cache_dir=<fresh temp dir>), so load_inline's build folder, Triton's and
CuPy's kernel caches (TRITON_CACHE_DIR / CUPY_CACHE_DIR, which the evaluator points into
cache_dir) and the cached baseline timings all start empty. (TorchInductor's own cache for the
torch.compile baseline is machine-wide and is not cleared.) Warm: the same cache dir again.
Each cell runs --reps times (cold load_inline --inline-cold-reps times, default 1), both with
bench=True (verified and timed) and bench=False (verified only). Cells are visited round-robin
(every cell gets one repetition before any gets a second), and no new evaluation starts after
--time-budget seconds. Targets, reported but not enforced: NVRTC and Triton verified and timed
in under 3 s median (warm cache), warm re-evaluation under 2 s, load_inline cold reported as is.

Judge cells (--judge-n evaluations each, --judge-gap-s idle seconds between them): what a search
loop sees. One `Judge` per cell keeps the task's reference process alive and keeps --spares
candidate processes started ahead (paused while anything is timed); "warm" evaluates the same source again (a
re-evaluation), "new" a new source each time (a comment inside the kernel text makes NVRTC,
Triton and load_inline miss their caches, as every new candidate does), "new-b2b" new sources
back to back, with no idle time to hide the candidate processes' start-up. The first
evaluation of a Judge carries its start-up and is left out of the cell's median; Judge cells
time no torch.compile baseline (it would only lengthen that first evaluation). --reps 0 runs
the Judge cells alone.

Run on the GPU machine, from the repository root:
    python benchmarks/eval_speed.py --out DIR [--reps 3] [--time-budget 420] [--size gpu] [--judge-n 4]
It writes DIR/eval_speed_<YYYY-MM-DD>.json (medians, raw numbers, hardware) and prints a table last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import warpforge  # noqa: F401
except ImportError:  # a source checkout without `pip install -e .`: use src/, for the children too
    _src = str(Path(__file__).resolve().parents[1] / "src")
    sys.path.insert(0, _src)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_src, os.environ.get("PYTHONPATH")]))

from warpforge import Candidate, EvalConfig, Judge, evaluate, load_task  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_gpu import header  # noqa: E402  (same hardware/software header as eval_gpu.py)

HERE = Path(__file__).resolve().parent
PATHS = {"pytorch": "relu__torch.py", "triton": "relu__triton.py", "nvrtc": "relu__nvrtc.py", "inline": "relu__cuda.py"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for eval_speed_<date>.json")
    ap.add_argument("--task", default="level1/relu")
    ap.add_argument("--size", default="gpu", help="size preset of the task (default gpu)")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated subset of {','.join(PATHS)}")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--inline-cold-reps", type=int, default=1, help="cold load_inline builds are slow")
    ap.add_argument("--no-nobench", action="store_true", help="skip the bench=False cells")
    ap.add_argument("--time-budget", type=float, default=420.0, help="start no evaluation after this many seconds")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu only to test this script")
    ap.add_argument("--judge-n", type=int, default=4, help="evaluations per Judge cell (0 skips the Judge cells)")
    ap.add_argument("--judge-gap-s", type=float, default=5.0,
                    help="idle seconds between a Judge's evaluations (a proposer's thinking time)")
    ap.add_argument("--spares", type=int, default=None,
                    help="EvalConfig.spare_workers of the Judge cells (default: the config's, 3 on CUDA)")
    ap.add_argument("--judge-first", action="store_true", help="run the Judge cells before the one-shot cells")
    ap.add_argument("--startup-n", type=int, default=3,
                    help="fresh processes timing a candidate process's start-up steps (0 skips)")
    args = ap.parse_args()

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = header(sys.argv)
    out_path = out_dir / f"eval_speed_{info['date']}.json"
    task = load_task(args.task)
    paths = [p for p in args.paths.split(",") if p]
    benches = [True] if args.no_nobench else [True, False]
    cells = [(path, bench, cache) for bench in benches for path in paths for cache in ("cold", "warm")]
    raw: dict[str, list[dict]] = {f"{p}|{'bench' if b else 'nobench'}|{c}": [] for p, b, c in cells}
    primed: dict[tuple[str, bool], str] = {}  # (path, bench) -> a cache dir a cold run filled
    temp_dirs: list[str] = []
    start, stopped = time.monotonic(), False
    judge_raw: dict[str, list[dict]] = {}
    startup = [startup_steps(args.device) for _ in range(args.startup_n)]
    for run in startup:
        print("start-up steps of a candidate process (s): " + " ".join(f"{k}={v}" for k, v in run.items()), flush=True)
    if args.judge_first and args.judge_n:
        judge_raw = judge_cells(task, paths, args, start)
    try:
        for rep in range(args.reps):
            for path, bench, cache in cells:
                if cache == "cold" and path == "inline" and rep >= args.inline_cold_reps:
                    continue
                if time.monotonic() - start > args.time_budget:
                    stopped = True
                    break
                if cache == "cold":
                    cache_dir = tempfile.mkdtemp(prefix="wf-speed-cold-")
                    temp_dirs.append(cache_dir)
                elif (path, bench) in primed:
                    cache_dir = primed[(path, bench)]
                else:
                    continue  # its cold run was skipped: nothing to be warm from
                config = EvalConfig.of(device=args.device, size=args.size, bench=bench, cache_dir=cache_dir, timeout_s=300)
                candidate = Candidate.from_file(HERE.parent / "examples" / "gpu" / PATHS[path])
                key = f"{path}|{'bench' if bench else 'nobench'}|{cache}"
                t0 = time.perf_counter()
                try:
                    result = evaluate(task, candidate, config)
                except Exception as exc:  # a harness error: record it, keep measuring the other cells
                    wall = time.perf_counter() - t0
                    raw[key].append({"seconds": round(wall, 3), "status": "harness_error",
                                     "reason": f"{type(exc).__name__}: {str(exc)[:300]}"})
                    print(f"rep {rep + 1} {key:24s} {wall:7.2f} s  harness_error | {exc}", flush=True)
                    continue
                wall = time.perf_counter() - t0
                if cache == "cold":
                    primed[(path, bench)] = cache_dir
                raw[key].append({"seconds": round(wall, 3), "status": result.status,
                                 "stage_seconds": result.stage_seconds,
                                 "candidate_ms": result.candidate.median_ms if result.candidate else None,
                                 "reason": result.reason[:300]})
                if "hardware" not in info and result.hardware:
                    info["hardware"] = result.hardware
                print(f"rep {rep + 1} {key:24s} {wall:7.2f} s  {result.status}"
                      f"{'' if result.correct else ' | ' + result.reason[:150]}", flush=True)
            if stopped:
                print(f"time budget reached after {time.monotonic() - start:.0f} s", flush=True)
                break
    finally:
        for d in temp_dirs:
            shutil.rmtree(d, ignore_errors=True)

    if args.judge_n and not args.judge_first:
        judge_raw = judge_cells(task, paths, args, start)
    raw.update(judge_raw)
    medians = {k: (statistics.median(r["seconds"] for r in v) if v and all(r["seconds"] is not None for r in v)
                   else None) for k, v in raw.items()}
    # a Judge's first evaluation carries its start-up; the turnaround is the median of the rest
    for key, runs in judge_raw.items():
        later = [r["seconds"] for r in runs[1:] if r["seconds"] is not None]
        medians[key] = statistics.median(later) if later else None

    def med(path: str, bench: str, cache: str) -> float | None:
        """The median seconds of a cell, counted only when every run of it was `correct`."""
        runs = raw.get(f"{path}|{bench}|{cache}") or []
        return medians[f"{path}|{bench}|{cache}"] if runs and all(r["status"] == "correct" for r in runs) else None

    targets: dict[str, dict] = {}
    for cache in ("cold", "warm"):
        fast = [med(p, "bench", cache) for p in ("nvrtc", "triton") if p in paths]
        if fast:
            worst = max(v for v in fast if v is not None) if None not in fast else None  # None: a run failed
            targets[f"nvrtc and triton verified+timed, {cache} cache: median < 3 s"] = {
                "value": worst, "met": worst is not None and worst < 3.0}
    for p in paths:
        if raw[f"{p}|bench|warm"]:
            v = med(p, "bench", "warm")
            targets[f"{p} warm-cache re-evaluation (verified+timed): median < 2 s"] = {
                "value": v, "met": v is not None and v < 2.0}
    for cell, target, what in (("new", 3.0, "a new source each time (compile cache cold for it)"),
                               ("warm", 2.0, "the same source again (warm compile cache)")):
        keys = [f"{p}|judge|{cell}" for p in ("nvrtc", "triton") if f"{p}|judge|{cell}" in judge_raw]
        if keys:
            vals = [med_judge(judge_raw, k, medians) for k in keys]
            worst = max(v for v in vals if v is not None) if vals and None not in vals else None
            targets[f"nvrtc and triton through a Judge, {what}: median < {target:g} s"] = {
                "value": worst, "met": worst is not None and worst < target}
    if raw.get("inline|bench|cold"):
        targets["load_inline cold build + evaluation (reported)"] = {"value": med("inline", "bench", "cold"),
                                                                      "met": None}
    info["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    info["total_seconds"] = round(time.monotonic() - start, 1)
    out_path.write_text(json.dumps({"header": info, "task": task.name, "size": args.size, "reps": args.reps,
                                    "medians_s": medians, "targets": targets, "raw": raw, "startup_steps_s": startup,
                                    "stopped_by_time_budget": stopped}, indent=1, default=str))
    print(f"\nwrote {out_path}")
    print(f"{'path':8s} {'mode':8s} {'cold_s':>8s} {'warm_s':>8s}  n_cold n_warm  status  (medians of correct runs)")
    for mode in ("bench", "nobench") if not args.no_nobench else ("bench",):
        for p in paths:
            c, w = raw[f"{p}|{mode}|cold"], raw[f"{p}|{mode}|warm"]
            statuses = sorted({r["status"] for r in c + w})
            print(f"{p:8s} {mode:8s} {fmt(med(p, mode, 'cold')):>8s} {fmt(med(p, mode, 'warm')):>8s}  "
                  f"{len(c):6d} {len(w):6d}  {','.join(statuses)}")
    if judge_raw:
        print(f"\n{'path':8s} {'judge cell':12s} {'median_s':>8s}  all runs (s; the first carries the start-up)")
        for key, runs in judge_raw.items():
            p, _, cell = key.split("|")
            statuses = sorted({r["status"] for r in runs})
            seconds = " ".join(fmt(r["seconds"]) for r in runs)
            print(f"{p:8s} {cell:12s} {fmt(med_judge(judge_raw, key, medians)):>8s}  {seconds}  {','.join(statuses)}")
    for name, t in targets.items():
        verdict = "reported" if t["met"] is None else "met" if t["met"] else "MISSED (or a run failed)"
        print(f"target {name}: {fmt(t['value'])} s -> {verdict}")
    return 0


def med_judge(judge_raw: dict[str, list[dict]], key: str, medians: dict[str, float | None]) -> float | None:
    runs = judge_raw.get(key) or []
    return medians.get(key) if runs and all(r["status"] == "correct" for r in runs) else None


def fresh_source(source: str, nonce: int) -> str:
    """The same program as a new source: a comment inside the kernel text, so NVRTC, Triton and
    load_inline all miss their caches, as every new candidate of a search does."""
    lines = source.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith('= r"""'):  # a CUDA source string (NVRTC, load_inline)
            lines.insert(i + 1, f"// nonce {nonce}")
            break
        if line.startswith("@triton.jit"):
            j = next(k for k in range(i + 1, len(lines)) if lines[k].rstrip().endswith(":"))
            lines.insert(j + 1, f"    # nonce {nonce}")
            break
    return "\n".join(lines) + f"\n# nonce {nonce}\n"


def judge_cells(task, paths: list[str], args: argparse.Namespace, start: float) -> dict[str, list[dict]]:
    """Per path: one Judge evaluating the same source --judge-n times ("warm"), one evaluating a
    new source each time ("new"), both with --judge-gap-s idle seconds between evaluations, and
    one with new sources back to back ("new-b2b"), where the next candidate process's start-up
    is not hidden. Every Judge starts on a fresh compile cache."""
    raw: dict[str, list[dict]] = {}
    nonce = int(time.time())
    for cell, gap in (("warm", args.judge_gap_s), ("new", args.judge_gap_s), ("new-b2b", 0.0)):
        for path in paths:
            if path == "inline" and cell != "warm":
                continue  # every new load_inline source is a cold nvcc build: reported by the one-shot cells
            if time.monotonic() - start > args.time_budget:
                print("time budget reached: Judge cells cut short", flush=True)
                return raw
            cache_dir = tempfile.mkdtemp(prefix="wf-speed-judge-")
            # no torch.compile baseline: it would add 5-60 s to the first evaluation, which is left out anyway
            config = EvalConfig.of(device=args.device, size=args.size, bench=True, cache_dir=cache_dir, timeout_s=300,
                                spare_workers=args.spares, compile_baseline=False)
            source = (HERE.parent / "examples" / "gpu" / PATHS[path]).read_text()
            key = f"{path}|judge|{cell}"
            runs = raw.setdefault(key, [])
            try:
                with Judge(task, config) as judge:
                    for i in range(args.judge_n):
                        nonce += 1
                        candidate = Candidate(fresh_source(source, nonce) if cell != "warm" else source)
                        if i and gap:
                            time.sleep(gap)
                        t0 = time.perf_counter()
                        result = judge.evaluate(candidate)
                        wall = time.perf_counter() - t0
                        runs.append({"seconds": round(wall, 3), "status": result.status,
                                     "stage_seconds": result.stage_seconds, "gap_s": gap if i else 0.0,
                                     "candidate_ms": result.candidate.median_ms if result.candidate else None,
                                     "reason": result.reason[:300]})
                        stages = " ".join(f"{k}={v:.2f}" for k, v in result.stage_seconds.items())
                        print(f"judge {key:24s} #{i + 1} {wall:7.2f} s  {result.status}  [{stages}]"
                              f"{'' if result.correct else ' | ' + result.reason[:150]}", flush=True)
            except Exception as exc:  # a harness error: record it, keep measuring the other cells
                runs.append({"seconds": None, "status": "harness_error", "reason": f"{type(exc).__name__}: {exc}"[:300]})
                print(f"judge {key} harness_error | {exc}", flush=True)
            finally:
                shutil.rmtree(cache_dir, ignore_errors=True)
    return raw


STARTUP_STEPS = r"""
import json, sys, time
t = {}; t0 = time.perf_counter()
import torch
t["import_torch"] = time.perf_counter() - t0
if sys.argv[1] == "cuda":
    t0 = time.perf_counter(); x = torch.ones(1024, device="cuda"); (x + 1).sum().item(); torch.cuda.synchronize()
    t["cuda_context"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    from torch.profiler import ProfilerActivity, profile
    t["import_profiler"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    p = profile(activities=[ProfilerActivity.CUDA])
    p.__enter__()
    t["first_cuda_profile_start"] = time.perf_counter() - t0
    (x + 1).sum().item()
    t0 = time.perf_counter()
    p.__exit__(None, None, None)
    t["first_cuda_profile_stop"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]):
        (x + 1).sum().item()
    t["second_cuda_profile"] = time.perf_counter() - t0
t0 = time.perf_counter()
try:
    import triton
except ImportError:
    pass
t["import_triton"] = time.perf_counter() - t0
t0 = time.perf_counter()
try:
    import cupy
except ImportError:
    pass
t["import_cupy"] = time.perf_counter() - t0
print(json.dumps({k: round(v, 3) for k, v in t.items()}))
"""


def startup_steps(device: str) -> dict[str, float]:
    """Seconds of each step a candidate process takes before it can run a candidate (worker.py's
    warm-up, step by step), in a fresh Python process; plus that process's whole lifetime."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", STARTUP_STEPS, device], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **({"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {})})
    steps = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {"error": done.stderr[-300:]}
    return {**steps, "process_total": round(time.perf_counter() - t0, 3)}


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


if __name__ == "__main__":
    sys.exit(main())
