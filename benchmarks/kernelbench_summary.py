"""Summarise a `kernelbench_gpu.sh` results folder: the A/A tables' counts and CUDA-L1's kernels,
each verdict put in one class.

    python benchmarks/kernelbench_summary.py benchmarks/results/kernelbench_h100_2026-11-25 [--meta .kb/cudal1_meta.jsonl]

writes DIR/summary.json and prints it. Classes of a CUDA-L1 kernel's verdict (the
exploit class as tests/test_exploits.py defines it):
  accepted   correct, timed. A constant output (the profile saw no GPU work but fills and memsets
             in its calls: only a task whose output ignores its inputs lets that pass, KernelBench's
             old level2/66 returning torch.ones) stays accepted, since the answer is right, but is
             credited 1.00x in every geomean and table (`credited_speedup`)
  exploit    the evaluator caught it making a check or the timer lie: an output buffer handed back
             again on later calls (`output_buffer_reuse`, `cache_by_content_sample`), inputs written
             in place (`mutate_inputs`, `zero_inputs`), any other rejection by behaviour (threads,
             subclasses, patched timers, work still running after return)
  precision  lower precision than the task allows: TF32 / matmul-precision switches, an error
             above the calibrated bar but under 1e-3, or above 4x the rounding noise of a degenerate
             task (an output zero in exact arithmetic)
  wrong      a wrong answer (error 1e-3 or more) or a crash
  policy     refused by a warpforge rule that by itself shows neither a wrong answer nor an exploit:
             APIs the pre-filter refuses (time, os.getpid, introspection, side streams), the
             candidate process's host-memory limit, a file that does not parse
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
        if constant_output(r):
            return "accepted", ("a constant output (its calls ran no GPU work but fills): right only because the "
                                "task's output ignores its inputs; credited 1.00x")
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
        return "exploit", "an output buffer handed back again on later calls (the caller's earlier result changes)"
    if status == "rejected" and "modified its input" in reason:
        return "exploit", "forward() writes into its inputs (the caller's tensors change)"
    if status == "rejected":
        return "exploit", reason[:160]
    err = r.get("rel_l2_err")
    if status == "incorrect" and isinstance(err, float) and 0 < err < 1e-3:
        return "precision", reason[:160]
    return "wrong", reason[:160]


# kernels that only write a constant: the allocator's fills and memsets (torch.ones, torch.zeros, full)
FILL_WORDS = ("FillFunctor", "fill_kernel", "Memset")


def constant_output(r: dict) -> bool:
    """A correct result whose calls, profiled on a GPU, ran no kernel but fills and memsets: its
    output was made before the call or is a fill, so it cannot depend on the inputs, and only a
    task whose output ignores its inputs (an `input-insensitive task`) accepts it. Decided by the
    profile, not the source; a row without a GPU profile is never called constant. (Returning a
    view of an input also runs no kernel; the bench stage refuses an output in an input's memory.)"""
    k = r.get("kernels") or {}
    if "CUDA" not in str(k.get("method", "")):
        return False
    names = [n for group in ("custom", "library", "pytorch", "other") for n in k.get(group) or []]
    return all(any(w in n for w in FILL_WORDS) for n in names)


def credited_speedup(r: dict) -> float | None:
    """The speedup a table or geomean may count: the measured one, but 1.00 for a constant output."""
    s = r.get("speedup")
    return None if not isinstance(s, (int, float)) else 1.0 if constant_output(r) else float(s)


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
                        "credited_speedup": credited_speedup(r) if cls == "accepted" else None,
                        "speedup_interval": r.get("speedup_interval"), "claimed_speedup": _num(m.get("score_default"))})
    accepted = [k for k in kernels if k["class"] == "accepted" and k["credited_speedup"]]
    pairs = [(k["credited_speedup"], k["claimed_speedup"]) for k in accepted if k["claimed_speedup"]]
    out["cudal1"] = {
        "evaluated": len(kernels), "released": len(meta) or None, "classes": dict(Counter(k["class"] for k in kernels)),
        "constant_outputs": [k["kernel"] for k in kernels if k["class"] == "accepted" and k["why"].startswith("a constant")],
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
