"""Summarise a `kernelbench_gpu.sh` results folder: the A/A tables' counts and CUDA-L1's kernels,
each verdict put in one class.

    python benchmarks/kernelbench_summary.py benchmarks/results/kernelbench_h100_2026-11-25 [--meta .kb/cudal1_meta.jsonl]

writes DIR/summary.json and prints it. Classes of a CUDA-L1 kernel's verdict (issue 19):
  accepted   correct, timed
  exploit    the timer or the checks were made to lie (content cache, faster than light)
  precision  lower precision than the task allows: TF32 / matmul-precision switches, an error
             above the calibrated bar but under 1e-3, or above 4x the rounding noise of a degenerate
             task (an output zero in exact arithmetic)
  wrong      a wrong answer (error 1e-3 or more), a crash, or an observable side effect on the
             caller's inputs
  policy     refused by a warpforge rule that does not by itself show a wrong answer: an output
             buffer handed back again on later calls, APIs the pre-filter refuses (time,
             os.getpid, introspection, side streams), the candidate process's host-memory limit
  harness    warpforge could not run the task (its float64 reference out of GPU memory, ...)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from warpforge import jsonl  # noqa: E402
from warpforge.calibrate import summarise  # noqa: E402
from warpforge.metrics import geometric_mean  # noqa: E402

PRECISION_WORDS = ("allow_tf32", "set_float32_matmul_precision", "precision")


def classify(r: dict) -> tuple[str, str]:
    status, stage, reason = r.get("status"), r.get("stage"), r.get("reason", "")
    if status == "correct":
        return "accepted", ""
    if status == "error" or "reference process" in reason:
        return "harness", reason[:160]
    if stage == "static":
        if any(w in reason for w in PRECISION_WORDS):
            return "precision", reason[:160]
        return "policy", reason[:160]
    if "of host memory" in reason and "killed" in reason:
        return "policy", ("killed for host memory over the candidate's limit (16 GB plus twice its input file); "
                          "whether its own code or the harness's host copy of its outputs took it was not established")
    if status == "incorrect" and any(w.startswith("degenerate task") for w in r.get("warnings") or []):
        return "precision", "degenerate task (an output zero in exact arithmetic): over 4x the task's own rounding noise"
    if status == "rejected" and ("changed during later calls" in reason or "did not allocate" in reason):
        return "policy", "an output buffer reused across calls (the caller's earlier result changes)"
    if status == "rejected" and "modified its input" in reason:
        return "wrong", "forward() writes into its inputs (a side effect the task's program does not have)"
    if status == "rejected":
        return "exploit", reason[:160]
    err = r.get("rel_l2_err")
    if status == "incorrect" and isinstance(err, float) and 0 < err < 1e-3:
        return "precision", reason[:160]
    return "wrong", reason[:160]


def latest_rows(files: list[Path], key: str) -> dict[str, dict]:
    """The last row for each task (key "task") or kernel (key "candidate", by file name) over FILES
    in the order given: a later run's row replaces an earlier one (files sort by run tag)."""
    out: dict[str, dict] = {}
    for f in files:
        for r in jsonl.read(f):
            if key in r:
                out[Path(r[key]).name if key == "candidate" else r[key]] = r
    return out


def aa(files: list[Path]) -> dict:
    rows = list(latest_rows(files, "task").values())
    return {"files": [f.name for f in files], **summarise(rows)} if rows else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--meta", default=".kb/cudal1_meta.jsonl", help="kernelbench_prep.py's CUDA-L1 facts (claimed speedups)")
    ap.add_argument("--settled", action="store_true",
                    help="print 'kb TASK' and 'cudal1 KERNEL' for each one whose latest row is not a harness error, and stop")
    args = ap.parse_args()
    d = Path(args.dir)
    if args.settled:
        for kind, glob, key in (("kb", "aa_kernelbench*.jsonl", "task"), ("cudal1", "cudal1*.jsonl", "candidate")):
            for name, row in latest_rows(sorted(d.glob(glob)), key).items():
                if classify(row)[0] != "harness":
                    print(kind, name)
        return
    out: dict = {
        "aa_suite": aa(sorted(d.glob("aa_suite*.jsonl"))),
        "aa_suite_before_sync_floor": aa(sorted(d.glob("run*_aa_suite_before_sync_floor.jsonl"))),
        "aa_kernelbench": aa(sorted(d.glob("aa_kernelbench*.jsonl"))),
        "aa_kernelbench_before_sync_floor": aa(sorted(d.glob("run*_aa_kernelbench_before_sync_floor.jsonl"))),
    }
    meta = {Path(m["pair"].rsplit(":", 1)[1]).name: m for m in jsonl.read(args.meta)}
    kernels = []
    for name, r in latest_rows(sorted(d.glob("cudal1*.jsonl")), "candidate").items():
        cls, why = classify(r)
        m = meta.get(name, {})
        kernels.append({"kernel": name, "task": m.get("task", r.get("task")), "class": cls, "why": why,
                        "status": r.get("status"), "speedup": r.get("speedup"),
                        "speedup_interval": r.get("speedup_interval"), "claimed_speedup": _num(m.get("score_default"))})
    accepted = [k for k in kernels if k["class"] == "accepted" and k["speedup"]]
    pairs = [(k["speedup"], k["claimed_speedup"]) for k in accepted if k["claimed_speedup"]]
    out["cudal1"] = {
        "evaluated": len(kernels), "released": len(meta) or None, "classes": dict(Counter(k["class"] for k in kernels)),
        "accepted_geomean_speedup": geometric_mean([s for s, _ in pairs]) if pairs else None,
        "same_kernels_claimed_geomean": geometric_mean([c for _, c in pairs]) if pairs else None,
        "kernels": kernels,
    }
    (d / "summary.json").write_text(json.dumps(out, indent=1) + "\n")
    brief = {k: ({kk: vv for kk, vv in v.items() if kk != "kernels"} if isinstance(v, dict) else v) for k, v in out.items()}
    print(json.dumps(brief, indent=1))


def _num(x: object) -> float | None:
    try:
        return float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


if __name__ == "__main__":
    main()
