"""Does anything the evaluator keeps alive slow a candidate's timed calls down?

For one task at its GPU size, the same honest candidate is evaluated --reps times through a
Judge in each setting, and its median time (and the eager reference's, timed once per Judge in
the clean reference process) is recorded:
    spares0         no spare candidate processes (each candidate process starts after the last ended)
    spares1, spares3  1 or 3 spare candidate processes, paused (SIGSTOP) during timing
    spares3_noprof  3 spares that never start the profiler (EvalConfig(profile=False))
    other_judge     spares1, with a second Judge of another task alive whose spare is warming up
A setting that makes the candidate slower than spares0 by more than the spread is interference.

Run on the GPU machine: python lab/interference.py --out DIR [--task level1/relu]
    [--candidate examples/gpu/relu__cuda.py] [--reps 3]
It writes DIR/interference_<YYYY-MM-DD>.json and prints one line per evaluation.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from warpforge import Candidate, EvalConfig, Judge, load_task  # noqa: E402

SETTINGS = {"spares0": {"spare_workers": 0}, "spares1": {"spare_workers": 1}, "spares3": {"spare_workers": 3},
            "spares3_noprof": {"spare_workers": 3, "profile": False}, "other_judge": {"spare_workers": 1}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--task", default="level1/relu")
    ap.add_argument("--other-task", default="level1/gelu")
    ap.add_argument("--candidate", default="examples/gpu/relu__cuda.py")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    args = ap.parse_args()
    task, candidate = load_task(args.task), Candidate.from_file(args.candidate)
    rows = []
    for name in args.settings.split(","):
        config = EvalConfig.of(device="cuda", **SETTINGS[name])  # type: ignore[arg-type]
        other = Judge(load_task(args.other_task), EvalConfig(device="cuda", spare_workers=1)) \
            if name == "other_judge" else None
        try:
            with Judge(task, config) as judge:
                for rep in range(args.reps):
                    if other is not None:  # its spare starts warming up now, during this evaluation
                        other._stop_workers()
                        other._top_up(1)
                    r = judge.evaluate(candidate)
                    row = {"setting": name, "rep": rep, "status": r.status,
                           "candidate_ms": r.candidate.median_ms if r.candidate else None,
                           "candidate_iqr_ms": r.candidate.iqr_ms if r.candidate else None,
                           "reference_ms": r.reference.median_ms if r.reference else None}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            if other is not None:
                other.close()
    summary = {}
    for name in args.settings.split(","):
        ms = [r["candidate_ms"] for r in rows if r["setting"] == name and r["candidate_ms"]]
        summary[name] = statistics.median(ms) if ms else None
    print("median candidate ms per setting: " + json.dumps(summary), flush=True)
    date = datetime.date.today().isoformat()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"interference_{date}.json").write_text(json.dumps(
        {"date": date, "task": args.task, "candidate": args.candidate, "rows": rows, "median_candidate_ms": summary},
        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
