"""Evaluate every GPU candidate and GPU exploit through warpforge's Python API.

What it measures: for each file in examples/gpu/ (honest kernels, named
`<task_stem>__<path>.py`, expected `correct`) and tests/fixtures/gpu_exploits/ (each declares
EXPECT = {"task": ..., "verdict": ...}), the evaluator's verdict on the task's GPU size with
the default timing budgets: status, reason, speedup over eager and over torch.compile, the
kind of kernels that ran, the fraction of the speed of light, and the wall-clock seconds of
each evaluation. It reports whether each verdict matched the expectation:
  - candidates: `correct`, and for triton/cuda/nvrtc files custom kernels seen by the profiler;
  - exploits with verdict "not_correct": any status but `correct` (at EXPECT["stage"] if given);
  - exploits with verdict "no_gain": not correct, or correct with a time no more than 2x better
    than the honest version (EXPECT["honest"] evaluated in this run, else the eager reference):
    side streams (the timer's device-wide sync must count the hidden work) and address-keyed
    caches (which may simply never hit when every call gets fresh addresses).
Evaluations of one task go through one `Judge` (its reference process and a spare candidate
process stay up between them), so a task's first evaluation carries the start-up in its
seconds and the later ones do not. It exits 0 even when expectations fail (it prints MISMATCH lines) and stops starting new
evaluations once --time-budget seconds have passed, writing what it has.

Run on the GPU machine, from the repository root:
    python benchmarks/eval_gpu.py --out DIR [--only relu,exploits] [--time-budget 420] [--resume FILE] [--no-static]
(--no-static: the static pre-filter off, so every exploit meets the run-time defences.)
It writes DIR/eval_gpu_<YYYY-MM-DD>.json after every evaluation and prints a table last.
(--device cpu --size cpu runs the same loop on a CPU machine, to test the script itself.)
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    import warpforge  # noqa: F401
except ImportError:  # a source checkout without `pip install -e .`: use src/, for the children too
    _src = str(Path(__file__).resolve().parents[1] / "src")
    sys.path.insert(0, _src)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_src, os.environ.get("PYTHONPATH")]))

from warpforge import Candidate, EvalConfig, Judge, load_task  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CANDIDATES = ROOT / "examples" / "gpu"
EXPLOITS = ROOT / "tests" / "fixtures" / "gpu_exploits"
# cheapest and most telling first, so a run cut short by the time budget still covers every
# compile path and every exploit; the 1 GB-input sum_reduction last
FIRST = ["relu__triton", "relu__cuda", "relu__nvrtc", "relu__torch"]
LAST = ["cumsum__triton", "transpose_add__nvrtc", "sum_reduction__nvrtc"]
NO_GAIN_LIMIT = 2.0  # an exploit accepted as correct may not be more than this much faster than honest code


def plan(only: list[str]) -> list[dict]:
    """Every evaluation to run, in order: honest candidates of the four paths, the exploits, the rest."""
    honest = {p.stem: p for p in sorted(CANDIDATES.glob("*__*.py"))}
    order = [s for s in FIRST if s in honest] + [s for s in honest if s not in FIRST + LAST] + \
            [s for s in LAST if s in honest]
    items: list[dict] = []
    for stem in order:
        task_stem, path_kind = stem.split("__", 1)
        items.append({"file": honest[stem], "kind": "candidate", "task": task_stem, "path": path_kind,
                      "expect": {"verdict": "correct"}})
    exploits = []
    for f in sorted(EXPLOITS.glob("*.py")):
        expect = read_expect(f)
        exploits.append({"file": f, "kind": "exploit", "task": expect["task"], "path": f.stem, "expect": expect})
    exploits.sort(key=lambda it: it["task"])  # consecutive evaluations of one task share a Judge
    # exploits go after the four relu paths (their honest yardsticks) and before the other candidates
    n_first = len([s for s in FIRST if s in honest])
    items = items[:n_first] + exploits + items[n_first:]
    if only:
        items = [it for it in items if any(o in rel(it["file"]) or o == it["kind"] for o in only)]
    return items


def rel(path: Path) -> str:
    # the names results files have always used (they lived in benchmarks/gpu_candidates and
    # benchmarks/gpu_exploits), so --resume and --only read older files too
    return f"{'gpu_candidates' if path.parent == CANDIDATES else 'gpu_exploits'}/{path.name}"


def read_expect(path: Path) -> dict:
    """The EXPECT literal of an exploit file, read without importing it."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EXPECT" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"{path} has no EXPECT = {{...}} literal")


def header(argv: list[str]) -> dict:
    def ver(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    import torch

    info = {"date": datetime.date.today().isoformat(), "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.executable).name, *argv]), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "triton": ver("triton"),
            "cupy": ver("cupy-cuda13x") or ver("cupy-cuda12x") or ver("cupy"), "python": sys.version.split()[0]}
    try:  # the parent never touches the GPU itself (no CUDA context here); nvidia-smi names it
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
        info["gpu"], info["driver"] = [s.strip() for s in out[0].split(",")][:2]
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        info["gpu"], info["driver"] = None, None
    try:  # the compiler load_inline candidates are built with
        info["nvcc"] = subprocess.run(["nvcc", "--version"], capture_output=True, text=True,
                                      timeout=20).stdout.strip().splitlines()[-1]
    except (OSError, subprocess.SubprocessError, IndexError):
        info["nvcc"] = None
    return info


def row(item: dict, result, seconds: float) -> dict:
    d = result.to_dict(samples=False)
    k = d.get("kernels") or {}
    r = {
        "file": rel(item["file"]), "kind": item["kind"], "task": d.get("task") or item["task"],
        "path": item["path"], "status": d["status"], "stage": d["stage"], "reason": d["reason"],
        "correct": d["correct"], "speedup": d["speedup"], "candidate_ms": d["candidate_ms"],
        "reference_ms": d["reference_ms"], "compile_ms": d["compile_ms"], "speedup_vs_compile": d["speedup_vs_compile"],
        "kernels_kind": k.get("kind"), "custom_time_fraction": k.get("custom_time_fraction"),
        "custom_kernels": (k.get("custom") or [])[:4], "roofline_fraction": (d.get("roofline") or {}).get("fraction"),
        "rel_l2_err": d.get("rel_l2_err"), "eval_seconds": round(seconds, 2), "stage_seconds": d.get("stage_seconds"),
        "warnings": d.get("warnings"), "hardware": d.get("hardware"), "expect": item["expect"],
    }
    if not d["correct"] or item["kind"] == "exploit":
        r["compile_log"] = d.get("compile_log", "")[-1500:]
        r["output_tail"] = d.get("output_tail", "")[-1500:]
    return r


def judge(r: dict, done: list[dict]) -> None:
    """Set r["matched"] and a one-line r["note"] from its expectation."""
    verdict = r["expect"]["verdict"]
    if verdict == "correct":
        r["matched"] = r["correct"]
        r["note"] = "" if r["correct"] else "honest candidate not accepted"
        # torch and torch.compile candidates run kernels PyTorch made (Inductor's count as PyTorch's)
        if r["correct"] and r["path"] not in ("torch", "compile") and r["kernels_kind"] != "custom_kernel":
            r["kind_ok"] = False
            r["note"] = f"correct, but the profiler saw no custom kernel (kind={r['kernels_kind']})"
        else:
            r["kind_ok"] = True
    elif verdict == "not_correct":
        stage = r["expect"].get("stage")
        r["matched"] = not r["correct"] and (stage is None or r["stage"] == stage)
        gain = f" ({r['speedup']:.2f}x eager)" if r.get("speedup") else ""
        r["note"] = "" if r["matched"] else (f"accepted as correct{gain}" if r["correct"] else
                                             f"caught at stage {r['stage']}, expected {stage}")
    elif verdict == "no_gain":
        if not r["correct"]:
            r["matched"], r["note"] = True, "caught"
            return
        honest = [h for h in done if h["file"].endswith("/" + str(r["expect"].get("honest"))) and h["correct"]]
        base_ms, against = (honest[-1]["candidate_ms"], honest[-1]["file"]) if honest else (r["reference_ms"], "eager")
        ratio = base_ms / r["candidate_ms"] if base_ms and r["candidate_ms"] else None
        r["gain_vs_honest"] = ratio
        r["matched"] = ratio is not None and ratio <= NO_GAIN_LIMIT
        r["note"] = f"correct; {ratio:.2f}x the speed of {against}" if ratio else "correct; no time to compare"
    else:
        r["matched"], r["note"] = False, f"unknown expectation {verdict!r}"


def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[dict]) -> str:
    lines = [f"{'file':42s} {'status':14s} {'speedup':>8s} {'vs_comp':>8s} {'cand_ms':>9s} {'kind':15s} "
             f"{'roof':>5s} {'secs':>6s}  ok"]
    for r in rows:
        ok = ("yes" if r.get("kind_ok") is not False else "yes, kind?") if r.get("matched") else "NO"
        lines.append(f"{r['file'][:42]:42s} {r['status'][:14]:14s} {fmt(r['speedup'], '8.3f')} "
                     f"{fmt(r['speedup_vs_compile'], '8.3f')} {fmt(r['candidate_ms'], '9.4f')} "
                     f"{str(r['kernels_kind'])[:15]:15s} {fmt(r['roofline_fraction'], '5.2f')} "
                     f"{r['eval_seconds']:6.1f}  {ok}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for eval_gpu_<date>.json")
    ap.add_argument("--only", default="", help="comma-separated substrings of file paths (or 'candidate'/'exploit')")
    ap.add_argument("--time-budget", type=float, default=420.0, help="start no evaluation after this many seconds")
    ap.add_argument("--timeout", type=float, default=180.0, help="per-evaluation limit of the candidate process (s)")
    ap.add_argument("--resume", help="an earlier eval_gpu JSON: keep its results and skip those files")
    ap.add_argument("--cache-dir", default="", help="warpforge compile/baseline cache (default: warpforge's)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu only to test this script")
    ap.add_argument("--size", default=None, help="size preset (default: gpu on cuda)")
    ap.add_argument("--no-static", action="store_true", help="turn the static pre-filter off (EvalConfig.static_checks): "
                    "every exploit then meets the run-time defences, which must refuse it by behaviour")
    args = ap.parse_args()

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = header(sys.argv)
    info["static_checks"] = not args.no_static
    out_path = out_dir / f"eval_gpu_{info['date']}{'_nostatic' if args.no_static else ''}.json"
    done: list[dict] = []
    if args.resume:
        done = json.loads(Path(args.resume).read_text())["results"]
    skip = {r["file"] for r in done}
    items = [it for it in plan([s for s in args.only.split(",") if s]) if rel(it["file"]) not in skip]
    config = EvalConfig.of(device=args.device, size=args.size, timeout_s=min(args.timeout, 180.0),
                        reference_timeout_s=min(args.timeout, 180.0), cache_dir=args.cache_dir, spare_workers=1,
                        static_checks=not args.no_static)
    print(f"{len(items)} evaluations planned on {info.get('gpu') or args.device}; budget {args.time_budget:g} s",
          flush=True)

    start = time.monotonic()
    walls: list[float] = []
    skipped: list[str] = []
    judges: dict[tuple[str, float], Judge] = {}  # the two most recently used tasks keep their Judge (reference process, spares)
    try:
        run_items(items, judges, config, args, info, out_path, done, walls, skipped, start)
    finally:
        for j in judges.values():
            j.close()

    info["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    info["total_seconds"] = round(time.monotonic() - start, 1)
    out_path.write_text(json.dumps({"header": info, "skipped": skipped, "results": done}, indent=1, default=str))
    print(f"\nwrote {out_path}")
    for r in done:
        if not r.get("matched"):
            print(f"MISMATCH {r['file']}: expected {r['expect']['verdict']}, got {r['status']} at {r['stage']}: "
                  f"{r.get('note', '')} | {r['reason'][:200]}")
        elif r.get("kind_ok") is False:
            print(f"KIND {r['file']}: {r['note']} (custom kernels found: {r.get('custom_kernels')})")
    if skipped:
        print(f"not run (time budget): {', '.join(skipped)}  -> rerun with --resume {out_path}")
    print(table(done))
    return 0


def run_items(items: list[dict], judges: dict, config: EvalConfig, args: argparse.Namespace, info: dict,
              out_path: Path, done: list[dict], walls: list[float], skipped: list[str], start: float) -> None:
    """Evaluate every item through a Judge per task, writing the JSON after each evaluation."""
    for n, item in enumerate(items):
        elapsed = time.monotonic() - start
        expected = min(180.0, 1.5 * statistics.median(walls)) if walls else 0.0
        if elapsed + expected > args.time_budget:
            skipped.extend(rel(it["file"]) for it in items[n:])
            print(f"time budget reached after {elapsed:.0f} s: skipping {len(skipped)} evaluations", flush=True)
            break
        t0 = time.monotonic()
        try:
            # a fixture may ask for a shorter time limit (a device hang): it gets a Judge of its own
            timeout = float(item["expect"].get("timeout_s", config.limits.timeout_s))
            key = (item["task"], timeout)
            if key not in judges:
                while len(judges) >= 2:
                    judges.pop(next(iter(judges))).close()
                judges[key] = Judge(load_task(item["task"]), config.replace(timeout_s=timeout))
            judges[key] = judges.pop(key)  # most recently used last
            result = judges[key].evaluate(Candidate.from_file(item["file"]))
        except Exception as exc:  # a harness error is a result too: record it and go on
            r = {"file": rel(item["file"]), "kind": item["kind"], "task": item["task"],
                 "path": item["path"], "status": "harness_error", "stage": "harness", "correct": False,
                 "reason": f"{type(exc).__name__}: {str(exc)[:1500]}", "speedup": None, "candidate_ms": None,
                 "reference_ms": None, "compile_ms": None, "speedup_vs_compile": None, "kernels_kind": None,
                 "custom_time_fraction": None, "roofline_fraction": None, "expect": item["expect"],
                 "eval_seconds": round(time.monotonic() - t0, 2)}
        else:
            r = row(item, result, time.monotonic() - t0)
        walls.append(r["eval_seconds"])
        judge(r, done)
        done.append(r)
        if r.get("hardware") and not info.get("hardware"):
            info["hardware"] = r["hardware"]
        print(f"[{n + 1}/{len(items)}] {r['file']}: {r['status']} ({r['eval_seconds']:.1f} s) "
              f"{'' if r['matched'] else 'MISMATCH '}{r.get('note', '')} | {r['reason'][:160]}", flush=True)
        info["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
        out_path.write_text(json.dumps({"header": info, "skipped": skipped, "results": done}, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
