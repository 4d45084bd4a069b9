"""End-to-end turnaround of one evaluation, per compile path, with a cold and a warm cache.

What it measures: the wall-clock seconds of `warpforge.evaluate(...)` from the Python API (this
process has torch imported already, as a long-running search loop would) for one cheap task,
level1/relu at its GPU size, with one candidate per compile path:
    pytorch  gpu_candidates/relu__torch.py    (no compilation)
    triton   gpu_candidates/relu__triton.py   (Triton JIT)
    nvrtc    gpu_candidates/relu__nvrtc.py    (CuPy RawModule / NVRTC)
    inline   gpu_candidates/relu__cuda.py     (torch.utils.cpp_extension.load_inline: nvcc + g++)
Cold: EvalConfig(cache_dir=<fresh temp dir>), so load_inline's build folder, Triton's and
CuPy's kernel caches (TRITON_CACHE_DIR / CUPY_CACHE_DIR, which the evaluator points into
cache_dir) and the cached baseline timings all start empty. (TorchInductor's own cache for the
torch.compile baseline is machine-wide and is not cleared.) Warm: the same cache dir again.
Each cell runs --reps times (cold load_inline --inline-cold-reps times, default 1), both with
bench=True (verified and timed) and bench=False (verified only). Cells are visited round-robin
(every cell gets one repetition before any gets a second), and no new evaluation starts after
--time-budget seconds. Targets, reported but not enforced: NVRTC and Triton verified and timed
in under 3 s median (warm cache), warm re-evaluation under 2 s, load_inline cold reported as is.

Run on the GPU machine, from the repository root:
    python benchmarks/eval_speed.py --out DIR [--reps 3] [--time-budget 420] [--size gpu]
It writes DIR/eval_speed_<YYYY-MM-DD>.json (medians, raw numbers, hardware) and prints a table last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
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

from warpforge import Candidate, EvalConfig, evaluate, load_task  # noqa: E402

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
                config = EvalConfig(device=args.device, size=args.size, bench=bench, cache_dir=cache_dir, timeout_s=300)
                candidate = Candidate.from_file(HERE / "gpu_candidates" / PATHS[path])
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

    medians = {k: (statistics.median(r["seconds"] for r in v) if v else None) for k, v in raw.items()}

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
    if raw.get("inline|bench|cold"):
        targets["load_inline cold build + evaluation (reported)"] = {"value": med("inline", "bench", "cold"),
                                                                      "met": None}
    info["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    info["total_seconds"] = round(time.monotonic() - start, 1)
    out_path.write_text(json.dumps({"header": info, "task": task.name, "size": args.size, "reps": args.reps,
                                    "medians_s": medians, "targets": targets, "raw": raw,
                                    "stopped_by_time_budget": stopped}, indent=1, default=str))
    print(f"\nwrote {out_path}")
    print(f"{'path':8s} {'mode':8s} {'cold_s':>8s} {'warm_s':>8s}  n_cold n_warm  status  (medians of correct runs)")
    for mode in ("bench", "nobench") if not args.no_nobench else ("bench",):
        for p in paths:
            c, w = raw[f"{p}|{mode}|cold"], raw[f"{p}|{mode}|warm"]
            statuses = sorted({r["status"] for r in c + w})
            print(f"{p:8s} {mode:8s} {fmt(med(p, mode, 'cold')):>8s} {fmt(med(p, mode, 'warm')):>8s}  "
                  f"{len(c):6d} {len(w):6d}  {','.join(statuses)}")
    for name, t in targets.items():
        verdict = "reported" if t["met"] is None else "met" if t["met"] else "MISSED (or a run failed)"
        print(f"target {name}: {fmt(t['value'])} s -> {verdict}")
    return 0


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


if __name__ == "__main__":
    sys.exit(main())
