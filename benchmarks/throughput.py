"""The throughput benchmark: verified-and-timed candidates per GPU-minute.

A fixed corpus of 100 candidates (36 load_inline CUDA builds, 52 Triton kernels, 12 PyTorch
rewrites; variants of the committed GPU examples over their launch parameters) for level1
relu, gelu, rmsnorm, softmax and layernorm at the tasks' GPU sizes, evaluated

- by warpforge: `evaluate_batch` on the local executor (one worker per GPU, the CPU compile
  pool building the CUDA candidates ahead), with the default, full evaluation (3 input sets
  checked against float64, L2-flushed timing to the harness's budget, the kernel profile, eager
  and torch.compile baselines);
- by a KernelBench-style serial evaluator in one process: for each candidate, a load_inline
  build into a fresh build folder, 5 correctness trials (torch.allclose, atol=rtol=1e-2), 100
  timed trials with CUDA events, then the next candidate. It runs on a stratified sample of
  the corpus (--serial-sample) to save GPU time; its rate per candidate is what is compared.

Writes OUT/throughput_<gpu>_<date>.json. Usage:
  python benchmarks/throughput.py --out OUT [--serial-sample 20] [--ablate 12] [--skip-serial]
  python benchmarks/throughput.py --out OUT --device cpu --families triton,pytorch --limit 6   # a dry run of the script
  python benchmarks/throughput.py --out OUT --device cpu --executor ray ...   # Ray actors instead of local workers
  python benchmarks/throughput.py --out OUT --skip-serial --resume   # continue a pool run a time limit stopped
  python benchmarks/throughput.py --out OUT --skip-serial --sample 36 --workers 1   # then without --workers:
  python benchmarks/throughput.py --out OUT --scaling ONE/throughput_*.json ALL/throughput_*.json   # 1 -> N GPUs
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "gpu"

TORCH_RELU = ["torch.relu(x)", "torch.clamp_min(x, 0.0)", "x.clamp(min=0.0)", "torch.nn.functional.relu(x)",
              "torch.where(x > 0, x, torch.zeros_like(x))", "torch.maximum(x, torch.zeros_like(x))"]
TORCH_GELU = ["torch.nn.functional.gelu(x)", "0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))",
              "x * 0.5 * torch.erfc(-x * 0.7071067811865476)", "torch.nn.functional.gelu(x, approximate='none')",
              "x * (0.5 + 0.5 * torch.erf(x / 1.4142135623730951))", "0.5 * x * torch.erfc(x * -0.7071067811865476)"]
TORCH_TEMPLATE = '''"""A PyTorch rewrite: {expr}."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return {expr}
'''


def corpus(folder: Path) -> list[dict[str, str]]:
    """Write the 100 candidates; returns [{task, candidate, family}]."""
    folder.mkdir(parents=True, exist_ok=True)
    items: list[dict[str, str]] = []

    def add(task: str, family: str, source: str) -> None:
        path = folder / f"{len(items):03d}_{task.split('/')[-1]}_{family}.py"
        path.write_text(source)
        items.append({"task": task, "candidate": str(path), "family": family})

    for name in ("relu", "gelu"):
        base = (EXAMPLES / f"{name}__cuda.py").read_text()
        for threads in (128, 256, 512, 1024):
            for vec in (1, 2, 4, 8):
                src = base.replace("constexpr int THREADS = 256;", f"constexpr int THREADS = {threads};")
                src = src.replace("constexpr int VEC_PER_THREAD = 4;", f"constexpr int VEC_PER_THREAD = {vec};")
                add(f"level1/{name}", "cuda", src.replace(f'name="wf_gpu_{name}_cuda_v1"', f'name="wf_tp_{name}_{threads}_{vec}"'))
    base = (EXAMPLES / "rmsnorm__cuda.py").read_text()
    for threads in (128, 256, 512, 1024):
        src = base.replace("constexpr int THREADS = 256;", f"constexpr int THREADS = {threads};")
        add("level1/rmsnorm", "cuda", src.replace('name="wf_gpu_rmsnorm_cuda_v1"', f'name="wf_tp_rmsnorm_{threads}"'))
    base = (EXAMPLES / "relu__triton.py").read_text()
    for block in (512, 1024, 2048, 4096, 8192):
        for warps in (1, 2, 4, 8):
            src = base.replace("block = 4096", f"block = {block}").replace("num_warps=8)", f"num_warps={warps})")
            add("level1/relu", "triton", src)
    for name in ("softmax", "layernorm"):
        base = (EXAMPLES / f"{name}__triton.py").read_text()
        for cap in (1024, 2048, 4096, 8192):
            for warps in (2, 4, 8, 16):
                src = re.sub(r"\), 4096\)", f"), {cap})", base, count=1)
                src = src.replace("num_warps=8 if block >= 2048 else 4", f"num_warps={warps}")
                add(f"level1/{name}", "triton", src)
    for expr in TORCH_RELU:
        add("level1/relu", "pytorch", TORCH_TEMPLATE.format(expr=expr))
    for expr in TORCH_GELU:
        add("level1/gelu", "pytorch", TORCH_TEMPLATE.format(expr=expr))
    sources = [Path(i["candidate"]).read_text() for i in items]
    assert len(set(sources)) == len(sources) == 100, "every corpus candidate must be a distinct source"
    return items


def stratified(items: list[dict[str, str]], n: int) -> list[dict[str, str]]:
    """n items with the corpus's family proportions, spread over it."""
    out = []
    for family in ("cuda", "triton", "pytorch"):
        group = [i for i in items if i["family"] == family]
        if not group:
            continue
        k = min(len(group), max(1, round(n * len(group) / len(items))))
        out += [group[j * len(group) // k] for j in range(k)]  # evenly over the family, so over its tasks
    return out


def serial_kernelbench(items: list[dict[str, str]], trials: int = 5, timed: int = 100,
                       device: str = "cuda") -> list[dict[str, Any]]:
    """One candidate after another in this process, the way KernelBench's eval does it."""
    import importlib.util

    import torch

    from warpforge.task import import_task_module, load_task

    rows: list[dict[str, Any]] = []
    for item in items:
        t0 = time.perf_counter()
        row: dict[str, Any] = {**item}
        build_dir = tempfile.mkdtemp(prefix="kb-build-")
        os.environ["TORCH_EXTENSIONS_DIR"] = build_dir
        try:
            task = load_task(item["task"])
            ref_mod = import_task_module(task, task.sizes("gpu" if device == "cuda" else "cpu"))
            spec = importlib.util.spec_from_file_location(f"kb_cand_{len(rows)}", item["candidate"])
            assert spec is not None and spec.loader is not None
            cand = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(cand)  # the build
            row["compile_s"] = round(time.perf_counter() - t0, 3)
            init = ref_mod.get_init_inputs()
            torch.manual_seed(42)
            model = ref_mod.Model(*init).to(device)
            torch.manual_seed(42)
            new = cand.ModelNew(*init).to(device)
            ok = True
            with torch.no_grad():
                for t in range(trials):
                    torch.manual_seed(1000 + t)
                    args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in ref_mod.get_inputs()]
                    ok &= bool(torch.allclose(model(*args), new(*args), atol=1e-2, rtol=1e-2))
                times = []
                if device == "cuda":
                    torch.cuda.synchronize()
                    for _ in range(timed):
                        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        start.record()
                        new(*args)
                        end.record()
                        torch.cuda.synchronize()
                        times.append(start.elapsed_time(end))
                else:  # the dry run: wall clock
                    for _ in range(timed):
                        t1 = time.perf_counter()
                        new(*args)
                        times.append((time.perf_counter() - t1) * 1e3)
            row.update(correct=ok, mean_ms=statistics.fmean(times))
        except Exception as exc:  # a failed build or run is a result too
            row.update(correct=False, error=f"{type(exc).__name__}: {str(exc)[:200]}")
        row["seconds"] = round(time.perf_counter() - t0, 3)
        rows.append(row)
        print(f"serial {len(rows)}/{len(items)} {Path(item['candidate']).name} {row['seconds']}s {row.get('correct')}", flush=True)
    return rows


KEPT = ("task", "candidate", "status", "speedup", "candidate_ms", "worker", "precompile", "compile_ms", "stage_seconds")


def pool_run(items: list[dict[str, str]], cache_dir: str, compile_workers: int | None, workers: int | None,
             device: str = "cuda", stream: Path | None = None, executor: str = "local",
             cuda_ipc: bool = True) -> dict[str, Any]:
    """warpforge's evaluation of the items; with `stream`, each result is appended there (with its
    second since the start) as it arrives, so a run cut off by a time limit keeps what it did."""
    from warpforge.config import EvalConfig
    from warpforge.executor import evaluate_batch

    # (cuda_ipc named only when off: the same script also drives older checkouts, for a baseline)
    config = EvalConfig.of(device="cpu" if device == "cpu" else "cuda", cache_dir=cache_dir,
                        **({} if cuda_ipc else {"cuda_ipc": False}))
    done = []

    def on_result(job: object, result: dict[str, Any]) -> None:
        done.append(time.perf_counter())
        print(f"pool {len(done)}/{len(items)} {Path(str(result.get('candidate'))).name} {result.get('status')} "
              f"{result.get('speedup')}", flush=True)
        if stream is not None:
            with stream.open("a") as f:
                f.write(json.dumps({"at_s": round(done[-1] - t0, 3), **{k: result.get(k) for k in KEPT}}) + "\n")

    t0 = time.perf_counter()
    results = evaluate_batch([(i["task"], i["candidate"]) for i in items], config, executor, workers, on_result=on_result,
                             compile_workers=compile_workers)
    wall = time.perf_counter() - t0
    return {"executor": executor, "wall_s": round(wall, 2), "statuses": dict(Counter(str(r.get("status")) for r in results)),
            "timed": sum(1 for r in results if r.get("candidate_ms")),
            "results": [{k: r.get(k) for k in KEPT} for r in results]}


def header(device: str) -> dict[str, Any]:
    import torch

    from warpforge.evaluate.hardware import fingerprint

    return {"date": dt.date.today().isoformat(), **fingerprint(device),
            "gpus": torch.cuda.device_count() if device == "cuda" else 0, "cpus": os.cpu_count(),
            "command": " ".join([Path(sys.executable).name, *sys.argv])}


def earlier_runs(stream: Path) -> list[list[dict[str, Any]]]:
    """The results a pool_results.jsonl already holds, split into runs (each run's `at_s` starts
    again from its own start), so a run stopped by a time limit still counts."""
    runs: list[list[dict[str, Any]]] = []
    last = float("inf")
    for line in stream.read_text().splitlines() if stream.exists() else []:
        if not line.strip():
            continue
        row = json.loads(line)
        if float(row["at_s"]) < last:
            runs.append([])
        runs[-1].append(row)
        last = float(row["at_s"])
    return runs


def merge_pool(earlier: list[list[dict[str, Any]]], new: dict[str, Any], gpus: int) -> dict[str, Any]:
    """One pool measurement over runs continued with --resume, each paying its own start-up: the
    results of all, the walls summed (an earlier run, stopped or not, counts until its last
    result), the rate over the sum."""
    runs = [{"wall_s": max(float(r["at_s"]) for r in run), "n": len(run)} for run in earlier]
    if new["results"]:
        runs.append({"wall_s": float(new["wall_s"]), "n": len(new["results"])})
    results = [r for run in earlier for r in run] + list(new["results"])
    wall = round(sum(float(r["wall_s"]) for r in runs), 2)
    return {"executor": new["executor"], "workers": gpus, "wall_s": wall, "runs": runs,
            "statuses": dict(Counter(str(r.get("status")) for r in results)),
            "timed": sum(1 for r in results if r.get("candidate_ms")), "results": results,
            "candidates_per_gpu_minute": round(len(results) / (wall * gpus / 60), 2) if wall else None}


def add_speedup(report: dict[str, Any]) -> bool:
    """The pool's rate over the serial evaluator's rate for the same corpus; False when one is missing."""
    if "warpforge" not in report or "kernelbench_serial" not in report:
        return False
    report["speedup_vs_serial"] = round(float(report["warpforge"]["candidates_per_gpu_minute"])
                                        / float(report["kernelbench_serial"]["corpus_rate_per_gpu_minute"]), 2)
    return True


def combine(files: list[Path], out: Path) -> None:
    """One report from runs split to fit a time limit: same GPU and corpus, the parts of each."""
    reports = [json.loads(f.read_text()) for f in files]
    first = reports[0]
    for f, r in zip(files, reports):
        if r["header"].get("gpu") != first["header"].get("gpu") or r["corpus"] != first["corpus"]:
            raise SystemExit(f"{f}: another GPU or corpus than {files[0]}; only runs on one GPU and corpus combine")
    merged: dict[str, Any] = {"header": {**first["header"], "combined_from": [r["header"]["command"] for r in reports]},
                              "corpus": first["corpus"]}
    for r in reports:
        merged.update({k: v for k, v in r.items() if k not in ("header", "corpus", "speedup_vs_serial")})
    add_speedup(merged)
    out.mkdir(parents=True, exist_ok=True)
    path = out / files[0].name
    path.write_text(json.dumps(merged, indent=1))
    print(json.dumps({k: v for k, v in merged.items() if k not in ("warpforge", "kernelbench_serial")}, indent=1))
    print("saved", path)


def scaling(one: Path, many: Path, out: Path) -> dict[str, Any]:
    """The speed-up from 1 to N GPU workers: two pool runs (`--workers 1`, then N) of the same
    candidates on one machine. Their walls' ratio is the scaling; the verdicts must agree."""
    a, b = (json.loads(f.read_text()) for f in (one, many))
    for f, r in ((one, a), (many, b)):
        if "warpforge" not in r:
            raise SystemExit(f"{f}: no pool run in it (was it made with --skip-pool?)")
    if a["header"].get("gpu") != b["header"].get("gpu"):
        raise SystemExit(f"{one} and {many} were measured on different GPUs; scaling compares runs on one machine")
    status = [{Path(str(r["candidate"])).name: r.get("status") for r in x["warpforge"]["results"]} for x in (a, b)]
    if set(status[0]) != set(status[1]):
        raise SystemExit(f"{one} and {many} evaluated different candidates; run both with the same --sample/--limit")
    runs = [{"workers": int(x["warpforge"]["workers"]), "wall_s": float(x["warpforge"]["wall_s"]),
             "statuses": x["warpforge"]["statuses"], "command": x["header"]["command"]} for x in (a, b)]
    report = {"header": {k: v for k, v in b["header"].items() if k != "command"}, "candidates": len(status[0]),
              "runs": runs, "speedup": round(runs[0]["wall_s"] / runs[1]["wall_s"], 2),
              "efficiency": round(runs[0]["wall_s"] / runs[1]["wall_s"] / (runs[1]["workers"] / runs[0]["workers"]), 2),
              "verdicts_differ": sorted(n for n in status[0] if status[0][n] != status[1][n])}
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"scaling_{re.sub(r'[^a-z0-9]+', '-', str(b['header'].get('gpu') or 'cpu').lower()).strip('-')}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    print("saved", path)
    return report


POOL_LINE = re.compile(r"^(\d+\.\d+) pool \d+/\d+ \d+_(\w+?)_(cuda|triton|pytorch)\.py (\w+)")


def summarise(folder: Path) -> dict[str, Any]:
    """What the saved runs measured, for runs split or cut short by a device's time limit:
    - per pool log (lines stamped with the epoch second): candidates done, seconds from the first
      result to the last, the median gap between consecutive results of one task, and the median
      gap where the task changed (a reference restart, its baselines and torch.compile);
    - per pool_results.jsonl: the median seconds of each evaluation stage;
    - per serial report: the mean seconds per candidate of each family.
    The corpus estimate for warpforge is first-result latency + (n - 1) x the same-task gap +
    (task runs - 1) x the task-change gap, with n and the task runs of the full corpus."""
    summary: dict[str, Any] = {"pool_logs": {}, "stages": {}, "serial": {}}
    for log in sorted(folder.rglob("*.log")):
        rows = [m.groups() for m in map(POOL_LINE.match, log.read_text().splitlines()) if m]
        if len(rows) < 2:
            continue
        same = [float(b[0]) - float(a[0]) for a, b in zip(rows, rows[1:]) if a[1] == b[1]]
        change = [float(b[0]) - float(a[0]) for a, b in zip(rows, rows[1:]) if a[1] != b[1]]
        summary["pool_logs"][str(log.relative_to(folder))] = {
            "done": len(rows), "families": {f: sum(1 for r in rows if r[2] == f) for f in ("cuda", "triton", "pytorch")},
            "first_to_last_s": round(float(rows[-1][0]) - float(rows[0][0]), 1),
            "same_task_gap_s": round(statistics.median(same), 2) if same else None,
            "task_change_gap_s": round(statistics.median(change), 2) if change else None}
    for stream in sorted(folder.rglob("pool_results.jsonl")):
        results = [json.loads(line) for line in stream.read_text().splitlines() if line.strip()]
        stages = sorted({k for r in results for k in (r.get("stage_seconds") or {})})
        summary["stages"][str(stream.relative_to(folder))] = {
            "n": len(results), "first_result_s": results[0]["at_s"] if results else None,
            "median_s": {k: round(statistics.median(float(r["stage_seconds"][k]) for r in results[1:]
                                                   if k in (r.get("stage_seconds") or {})), 3)
                         for k in stages if len(results) > 1}}
    for report in sorted(folder.rglob("throughput_*.json")):
        serial = json.loads(report.read_text()).get("kernelbench_serial")
        if serial:
            rows = serial["rows"]
            summary["serial"][str(report.relative_to(folder))] = {
                "n": len(rows), "corpus_estimate_s": serial["corpus_estimate_s"],
                "corpus_rate_per_gpu_minute": serial["corpus_rate_per_gpu_minute"],
                "mean_s": {f: round(statistics.fmean(float(r["seconds"]) for r in rows if r["family"] == f), 2)
                           for f in ("cuda", "triton", "pytorch") if any(r["family"] == f for r in rows)}}
    logs = [v for v in summary["pool_logs"].values() if v["same_task_gap_s"] and v["task_change_gap_s"]]
    firsts = [v["first_result_s"] for v in summary["stages"].values() if v["first_result_s"]]
    if logs and firsts and summary["serial"]:
        items = corpus(Path(tempfile.mkdtemp(prefix="wf-corpus-")))
        runs = 1 + sum(1 for a, b in zip(items, items[1:]) if a["task"] != b["task"])
        gap = statistics.median(v["same_task_gap_s"] for v in logs)
        change = statistics.median(v["task_change_gap_s"] for v in logs)
        estimate = min(firsts) + (len(items) - 1) * gap + (runs - 1) * change
        serial = next(iter(summary["serial"].values()))
        summary["estimate"] = {"candidates": len(items), "task_runs": runs, "warpforge_corpus_s": round(estimate),
                               "warpforge_rate_per_gpu_minute": round(len(items) / (estimate / 60), 2),
                               "serial_rate_per_gpu_minute": serial["corpus_rate_per_gpu_minute"],
                               "speedup_vs_serial": round(len(items) / (estimate / 60) / serial["corpus_rate_per_gpu_minute"], 2)}
    (folder / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--serial-sample", type=int, default=20, help="candidates the serial evaluator runs (default 20)")
    ap.add_argument("--skip-serial", action="store_true")
    ap.add_argument("--skip-pool", action="store_true")
    ap.add_argument("--ablate", type=int, default=0, help="also run this many CUDA candidates through warpforge with no compile pool")
    ap.add_argument("--workers", type=int, help="GPU workers (default: one per GPU)")
    ap.add_argument("--executor", choices=["local", "ray"], default="local",
                    help="warpforge's executor: local worker processes, or Ray actors on a local Ray instance")
    ap.add_argument("--compile-workers", type=int, help="CPU compile processes (default: the pool's)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a dry run of this script (Triton interpreted)")
    ap.add_argument("--families", default="cuda,triton,pytorch", help="corpus families to run (default: all)")
    ap.add_argument("--no-cuda-ipc", action="store_true",
                    help="hand GPU inputs and outputs between the processes as files (EvalConfig.cuda_ipc=False)")
    ap.add_argument("--limit", type=int, help="run only the first N candidates of each family (a dry run)")
    ap.add_argument("--sample", type=int, help="run a sample of N candidates, spread over the families and tasks in "
                    "the corpus's proportions (e.g. a scaling measurement that fits a time limit)")
    ap.add_argument("--resume", action="store_true",
                    help="continue the pool measurement saved in OUT: evaluate only the candidates it lacks, add the walls")
    ap.add_argument("--summarise", metavar="DIR", help="the rates and stage times of the runs saved under DIR (logs "
                    "with timestamps, pool_results.jsonl, serial reports), written to DIR/summary.json")
    ap.add_argument("--scaling", nargs=2, metavar=("ONE", "MANY"),
                    help="the 1 -> N GPU speed-up from two reports of the same candidates, with --workers 1 and N")
    ap.add_argument("--combine", nargs="+", metavar="JSON",
                    help="merge reports of separate runs on one GPU (e.g. --skip-serial, then --skip-pool) into OUT")
    args = ap.parse_args()
    if args.summarise:
        summarise(Path(args.summarise))
        return
    if args.scaling:
        scaling(Path(args.scaling[0]), Path(args.scaling[1]), Path(args.out))
        return
    if args.combine:
        combine([Path(f) for f in args.combine], Path(args.out))
        return
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # the serial evaluator runs Triton in this process
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    families = [f for f in args.families.split(",") if f]
    items = [i for i in corpus(out / "corpus") if i["family"] in families]
    if args.limit:
        items = [i for f in families for i in [j for j in items if j["family"] == f][: args.limit]]
    if args.sample:
        items = stratified(items, args.sample)
    report: dict[str, Any] = {"header": header(args.device),
                                 "corpus": {f: sum(1 for i in items if i["family"] == f) for f in families}}
    # workers: one per GPU by default; a dry run on the CPU counts a worker as a GPU
    gpus = args.workers or (int(report["header"]["gpus"]) or 1 if args.device == "cuda" else 1)
    path = out / f"throughput_{re.sub(r'[^a-z0-9]+', '-', str(report['header'].get('gpu') or 'cpu').lower()).strip('-')}_{report['header']['date']}.json"

    def save() -> None:
        path.write_text(json.dumps(report, indent=1))

    if not args.skip_pool:
        stream = out / "pool_results.jsonl"
        if not args.resume and stream.exists():
            stream.unlink()  # a new measurement, not a continuation
        earlier = earlier_runs(stream)
        seen = {Path(str(r["candidate"])).name for run in earlier for r in run}
        todo = [i for i in items if Path(i["candidate"]).name not in seen]
        pool = pool_run(todo, tempfile.mkdtemp(prefix="wf-cache-"), args.compile_workers, args.workers, args.device,
                        stream=stream, executor=args.executor, cuda_ipc=not args.no_cuda_ipc) \
            if todo else {"executor": args.executor, "results": []}
        report["warpforge"] = merge_pool(earlier, pool, gpus)
        save()
    if args.ablate:
        cuda = [i for i in items if i["family"] == "cuda"][: args.ablate]
        abl = pool_run(cuda, tempfile.mkdtemp(prefix="wf-cache-"), 0, args.workers, args.device)
        abl["candidates_per_gpu_minute"] = round(len(cuda) / (float(abl["wall_s"]) * gpus / 60), 2)
        report["warpforge_no_compile_pool_cuda_only"] = abl
        save()
    if not args.skip_serial:
        sample = stratified(items, args.serial_sample)
        t0 = time.perf_counter()
        rows = serial_kernelbench(sample, device=args.device)
        wall = time.perf_counter() - t0
        report["kernelbench_serial"] = {"wall_s": round(wall, 2), "n": len(rows), "sample": "stratified by family",
                                        "candidates_per_gpu_minute": round(len(rows) / (wall / 60), 2), "rows": rows}
        # the same mix as the corpus: per-family mean seconds weighted by the corpus's counts
        per_family = {f: statistics.fmean(float(r["seconds"]) for r in rows if r["family"] == f)
                      for f in ("cuda", "triton", "pytorch") if any(r["family"] == f for r in rows)}
        corpus_s = sum(per_family[f] * n for f, n in report["corpus"].items() if f in per_family)
        report["kernelbench_serial"]["corpus_estimate_s"] = round(corpus_s, 1)
        report["kernelbench_serial"]["corpus_rate_per_gpu_minute"] = round(len(items) / (corpus_s / 60), 2)
        save()
    if add_speedup(report):
        save()
    print(json.dumps({k: v for k, v in report.items() if k not in ("warpforge", "kernelbench_serial")}, indent=1))
    print("saved", path)


if __name__ == "__main__":
    main()
