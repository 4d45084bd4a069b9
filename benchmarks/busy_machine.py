"""The main job on a busy machine: demo runs and evaluations of every bundled example, with
other processes keeping the cores busy, as a shared workstation or CI runner is.

What it measures: with LOAD processes per 2 cores running beside it —
`steady` (a busy loop) or `bursty` (busy 5-50 ms, idle 5-50 ms, copying 8 MiB at a time: load
that comes and goes, as builds and installs do; scripts/busy_load.py) — it runs
  - `--evals N` evaluations (`warpforge eval --device cpu`, human output, as a user types it) of
    each CPU example of the demo, under each load kind in turn, and records the exit code,
    whether a traceback appeared and the speed line (the claim in words);
  - `--demos M` runs of the README's main job (`bash scripts/demo.sh`), split over the load kinds,
    recording the exit code and whether the report was written.
It counts crashes (a traceback, or an exit code other than 0 for these correct examples) and how
often level1/diag_matmul's ~40x win was claimed (`faster`).

    python benchmarks/busy_machine.py --out DIR [--evals 10] [--demos 5] [--loads steady,bursty] [--load 2]

writes DIR/busy_machine_<YYYY-MM-DD>.json (every run, the load average seen, the machine) and
prints a summary. It takes about 45 minutes on 2 cores with the defaults.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from busy_load import Load  # noqa: E402  (the same load as scripts/test_busy.sh)
EXAMPLES = [("level1/diag_matmul", "diag_matmul_broadcast.py"), ("level1/relu", "relu_cpp.py"),
            ("level1/softmax", "softmax_triton.py")]


def run(cmd: list[str], timeout: float) -> dict:
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHON": sys.executable})  # demo.sh installs into this Python
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = None, str(exc.stdout or ""), str(exc.stderr or "")
    return {"exit": code, "seconds": round(time.monotonic() - started, 1), "stdout": out, "stderr": err,
            "traceback": "Traceback (most recent call last)" in out + err, "load_average": os.getloadavg()[0]}


def evaluate(task: str, example: str, kind: str) -> dict:
    """One evaluation with the human output a user reads; its speed line says the claim."""
    human = run([sys.executable, "-m", "warpforge.cli", "eval", task, str(ROOT / "examples" / example), "--device", "cpu"],
                900)
    speed = [line.strip() for line in human["stdout"].splitlines() if "speed vs eager" in line]
    words = speed[0].split(": ", 1)[-1] if speed else ""
    verdict = ("faster" if "x faster [" in words else "slower" if ", slower [" in words
               else "within_noise" if ", within noise [" in words else "not_timed")
    return {"task": task, "example": example, "load": kind, "exit": human["exit"], "traceback": human["traceback"],
            "speed_line": speed[0] if speed else None, "verdict": verdict, "seconds": human["seconds"],
            "load_average": human["load_average"],
            "tail": (human["stdout"] + human["stderr"])[-600:] if human["exit"] != 0 or human["traceback"] else ""}


def demo(kind: str) -> dict:
    report = ROOT / "warpforge-demo" / "report" / "index.html"
    if report.exists():
        report.unlink()
    r = run(["bash", "scripts/demo.sh"], 3600)
    return {"load": kind, "exit": r["exit"], "traceback": r["traceback"], "report_written": report.is_file(),
            "seconds": r["seconds"], "load_average": r["load_average"],
            "summary": [line for line in r["stderr"].splitlines() if "tasks proven faster" in line or "correct " in line][-2:],
            "tail": r["stderr"][-800:] if r["exit"] != 0 or r["traceback"] else ""}


def machine() -> dict:
    import torch

    try:
        from importlib.metadata import version
        triton = version("triton")
    except Exception:  # noqa: BLE001 — a fact for the record, optional
        triton = None
    return {"date": datetime.date.today().isoformat(), "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "python": sys.version.split()[0], "torch": torch.__version__, "triton": triton,
            "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    ap.add_argument("--out", required=True, help="folder for busy_machine_<date>.json")
    ap.add_argument("--evals", type=int, default=10, help="evaluations of each example under each load kind (default 10)")
    ap.add_argument("--demos", type=int, default=5, help="runs of scripts/demo.sh, split over the load kinds (default 5)")
    ap.add_argument("--loads", default="steady,bursty", help="load kinds, comma-separated (default steady,bursty)")
    ap.add_argument("--load", type=int, default=2, help="load processes per 2 cores (default 2)")
    args = ap.parse_args()
    kinds = [k for k in args.loads.split(",") if k]
    if not kinds or any(k not in ("steady", "bursty") for k in kinds):
        ap.error("--loads takes steady and/or bursty")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"busy_machine_{datetime.date.today().isoformat()}.json"
    record: dict = {"machine": machine(), "load_per_2_cores": args.load, "evals": [], "demos": []}
    for i, kind in enumerate(kinds):
        with Load(kind, args.load):
            for n in range(args.evals):
                for task, example in EXAMPLES:
                    row = evaluate(task, example, kind)
                    record["evals"].append(row)
                    print(f"[{kind} {n + 1}/{args.evals}] {example}: exit {row['exit']}, {row['speed_line']}", flush=True)
                    path.write_text(json.dumps(record, indent=1))
            for n in range(args.demos // len(kinds) + (1 if i < args.demos % len(kinds) else 0)):
                row = demo(kind)
                record["demos"].append(row)
                print(f"[{kind} demo] exit {row['exit']}, report {row['report_written']}, {row['seconds']} s", flush=True)
                path.write_text(json.dumps(record, indent=1))
    evals, demos = record["evals"], record["demos"]
    diag = [e for e in evals if e["task"] == "level1/diag_matmul"]
    record["summary"] = {
        "evaluations": len(evals),
        "crashes": sum(1 for e in evals if e["exit"] != 0 or e["traceback"]),
        "diag_matmul_claimed_faster": sum(1 for e in diag if e["verdict"] == "faster"),
        "verdicts": {f"{t}/{k}": [e["verdict"] for e in evals if e["task"] == t and e["load"] == k]
                     for t, _ in EXAMPLES for k in kinds},
        "diag_matmul_evaluations": len(diag),
        "demo_runs": len(demos), "demo_exit_0": sum(1 for d in demos if d["exit"] == 0),
        "demo_reports_written": sum(1 for d in demos if d["report_written"]),
        "load_average_max": max([e["load_average"] for e in evals] + [d["load_average"] for d in demos] or [0.0]),
    }
    path.write_text(json.dumps(record, indent=1))
    print(json.dumps(record["summary"], indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
