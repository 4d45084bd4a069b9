"""Where a 1 -> N GPU scaling run's time went, per phase (issue 24): from each phase's streamed
pool_results.jsonl, per run (a phase resumed across device calls has several), its first result,
last result and the seconds per candidate between them; over the phase, the task starts (a
`reference` stage over 1 s: the task's reference process and baselines started) and the summed
candidate processes and bench stages.

    python lab/scaling_breakdown.py DIR/w1 DIR/wall [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def runs_of(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Split a stream into its runs: `at_s` starts again from 0 in each."""
    runs: list[list[dict[str, Any]]] = []
    last = float("inf")
    for r in rows:
        if float(r["at_s"]) < last:
            runs.append([])
        runs[-1].append(r)
        last = float(r["at_s"])
    return runs


def breakdown(folder: Path) -> dict[str, Any]:
    rows = [json.loads(line) for line in (folder / "pool_results.jsonl").read_text().splitlines() if line.strip()]
    stages = [r.get("stage_seconds") or {} for r in rows]
    starts = [(r["worker"], r["task"], round(s["reference"], 1)) for r, s in zip(rows, stages) if s.get("reference", 0) > 1]
    return {
        "phase": folder.name, "results": len(rows),
        "statuses": sorted({str(r.get("status")) for r in rows}),
        "runs": [{"n": len(run), "first_result_s": run[0]["at_s"], "last_result_s": run[-1]["at_s"],
                  "s_per_candidate_after_first": round((run[-1]["at_s"] - run[0]["at_s"]) / max(len(run) - 1, 1), 2)}
                 for run in runs_of(rows)],
        "task_starts": len(starts), "task_start_s": round(sum(s[2] for s in starts), 1), "starts": starts,
        "candidate_process_s": round(sum(s.get("candidate_process", 0.0) for s in stages), 1),
        "median_bench_s": round(statistics.median(s.get("bench", 0.0) for s in stages), 3),
        "median_reference_rounds_s": round(statistics.median(s.get("reference_rounds", 0.0) for s in stages), 3),
        "last_result_per_worker_s": {w: max(r["at_s"] for r in rows if r["worker"] == w)
                                     for w in sorted({r["worker"] for r in rows})},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("phases", nargs="+", help="phase folders (each with pool_results.jsonl)")
    ap.add_argument("--out", help="save the breakdowns as JSON")
    args = ap.parse_args()
    out = [breakdown(Path(p)) for p in args.phases]
    print(json.dumps(out, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
