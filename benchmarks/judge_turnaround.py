"""A Judge's turnaround per candidate, and its bench stage, on one task: what a search loop sees.

Evaluates one candidate --n times through one Judge (default config for the device: paired
timing, spares) and reports the median of evaluations 2..n (the first carries the start-up):
turnaround seconds, and the stage seconds `bench` and `reference_rounds`. Used for the
CPU check of freezing start-up objects out of the garbage collector (gc.freeze in the children):

    python benchmarks/judge_turnaround.py --out DIR --label after [--device cpu] [--n 7]

appends one row to DIR/judge_turnaround.jsonl.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

try:
    import warpforge  # noqa: F401
except ImportError:
    _src = str(Path(__file__).resolve().parents[1] / "src")
    sys.path.insert(0, _src)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_src, os.environ.get("PYTHONPATH")]))

from warpforge import Candidate, EvalConfig, Judge, load_task  # noqa: E402
from warpforge.evaluate.hardware import fingerprint  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", required=True, help="what this run measures (e.g. the commit or the change)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--task", default="level1/relu")
    ap.add_argument("--candidate", default=str(ROOT / "examples/gpu/relu__torch.py"))
    ap.add_argument("--n", type=int, default=7)
    ap.add_argument("--rep-ms", type=float, default=None, help="the timing budget (EvalConfig.rep_ms; default its default)")
    args = ap.parse_args()
    candidate = Candidate.from_file(Path(args.candidate))
    rows = []
    config = EvalConfig.of(device=args.device, **({"rep_ms": args.rep_ms} if args.rep_ms else {}))
    with Judge(load_task(args.task), config) as judge:
        for _ in range(args.n):
            t0 = time.perf_counter()
            result = judge.evaluate(candidate)
            rows.append({"seconds": time.perf_counter() - t0, "status": result.status, **result.stage_seconds})
    later = rows[1:]

    def median(key: str) -> float | None:
        values = [r[key] for r in later if key in r]
        return round(statistics.median(values), 3) if values else None

    row = {"label": args.label, "date": datetime.date.today().isoformat(), "device": args.device, "task": args.task,
           "rep_ms": config.timing.rep_ms,
           "candidate": Path(args.candidate).name, "n": args.n, "statuses": sorted({r["status"] for r in rows}),
           "turnaround_s": median("seconds"), "bench_s": median("bench"), "reference_rounds_s": median("reference_rounds"),
           "hardware": fingerprint(args.device), "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "judge_turnaround.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps({k: v for k, v in row.items() if k not in ("rows", "hardware")}))


if __name__ == "__main__":
    main()
