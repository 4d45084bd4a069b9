"""Where an evaluation's seconds go, per task: the median of each stage over the results of one
or more `eval-batch --jobs` runs (folders of result JSONs, or the results.tgz that
benchmarks/outbox_gpu.sh brings back). Used for issue 21's stage table at KernelBench's sizes.

    python lab/campaign_stages.py RUN [RUN ...] [--out FILE.json]

Prints one row per (run, task): results, statuses, and median seconds of the stages; --out saves
the same as JSON. A task's first result also carries its reference process's start and the
baselines, so the medians are over its later results when it has any."""

from __future__ import annotations

import argparse
import json
import statistics
import tarfile
from pathlib import Path
from typing import Any

STAGES = ("reference", "reference_draw", "reference_outputs", "reference_hand_over", "verify", "compare", "bench",
          "reference_rounds", "profile", "candidate_process")


def results(run: str) -> list[dict[str, Any]]:
    path = Path(run)
    if path.is_dir():
        return [json.loads(p.read_text()) for p in sorted(path.glob("*.json"))]
    with tarfile.open(path) as tar:
        return [json.load(tar.extractfile(m)) for m in tar.getmembers() if m.isfile() and m.name.endswith(".json")]


def table(run: str) -> list[dict[str, Any]]:
    by_task: dict[str, list[dict[str, Any]]] = {}
    for r in results(run):
        by_task.setdefault(Path(str(r.get("task"))).stem, []).append(r)
    rows = []
    for task, rs in sorted(by_task.items()):
        timed = [r for r in rs if r.get("stage_seconds")]
        # the first evaluation of a task on a worker starts its reference process: leave it out when others exist
        later = sorted(timed, key=lambda r: r["stage_seconds"].get("reference", 0))[:-1] if len(timed) > 1 else timed
        row: dict[str, Any] = {"run": run, "task": task, "results": len(rs),
                               "statuses": sorted({str(r.get("status")) for r in rs})}
        for stage in STAGES:
            values = [r["stage_seconds"][stage] for r in later if stage in r["stage_seconds"]]
            row[stage] = round(statistics.median(values), 2) if values else None
        sets = [w for r in rs for w in r.get("warnings") or [] if w.startswith("input sets reduced")]
        row["sets_note"] = sets[0].split(":")[0] if sets else ""
        rows.append(row)
    return rows


def final_estimate(runs: list[str], kernels: int) -> float:
    """GPU-seconds for evaluating `kernels` kernels of every task seen in `runs` in one more run."""
    by_task: dict[str, list[dict[str, float]]] = {}
    for run in runs:
        for r in results(run):
            if r.get("stage_seconds"):
                by_task.setdefault(str(r.get("task")), []).append(r["stage_seconds"])
    return sum(max(s.get("reference", 0.0) for s in ss)
               + kernels * statistics.median(s.get("candidate_process", 0.0) for s in ss) for ss in by_task.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="result folders or results.tgz files")
    ap.add_argument("--out", help="save the rows as JSON")
    ap.add_argument("--final-kernels", type=int, metavar="N",
                    help="also estimate a final run of N kernels a task over these results' tasks: each task's "
                         "slowest reference start plus N times its median candidate process")
    args = ap.parse_args()
    if args.final_kernels:
        print(f"estimated final run: {final_estimate(args.runs, args.final_kernels):.0f} GPU-seconds")
    rows = [row for run in args.runs for row in table(run)]
    cols = ("results",) + STAGES
    # the reference process's parts read as ref_draw, ref_outputs, ...: the first ten letters
    # of their names would all read "reference_"
    print("task".ljust(34) + "".join(c.replace("reference_", "ref_").replace("candidate_", "cand_")[:10].rjust(11)
                                     for c in cols))
    for i, row in enumerate(rows):
        if i == 0 or row["run"] != rows[i - 1]["run"]:
            print(f"== {row['run']}")
        print(row["task"][:33].ljust(34) + "".join(("-" if row[c] is None else str(row[c])).rjust(11) for c in cols))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
