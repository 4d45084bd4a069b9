"""The verdict of every exploit fixture and honest candidate of the CPU adversarial suite, one
JSON line each, and the comparison of two such files.

Run it before and after a change to the evaluator to show that no verdict moved: each row is
what `tests/test_exploits.py` evaluates (the same fixtures, tasks and configurations, imported
from it), with the status, the stage it ended in and the reason. `--compare` counts a change of
status or stage as a moved verdict (exit 1), unless the suite allows both (a cache exploit may be
caught as `incorrect` or as `rejected`, whichever defence fires first), and lists those and
reasons whose words changed apart, as information.

usage: python benchmarks/verdict_snapshot.py --out FILE.jsonl
       python benchmarks/verdict_snapshot.py --compare BEFORE.jsonl AFTER.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def snapshot(out: Path) -> int:
    sys.path.insert(0, str(ROOT))
    from tests import test_exploits as suite  # the suite's own tables and configurations

    from warpforge.evaluate.hardware import fingerprint

    rows = ([(e[0], e[1], e[2], e[5], sorted(e[3])) for e in suite.EXPLOITS]
            + [(h[0], h[1], h[2], {}, ["correct"]) for h in suite.HONEST])
    with out.open("w") as f:
        f.write(json.dumps({"machine": fingerprint("cpu"), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                            "fixtures": len(rows)}) + "\n")
        for i, (candidate, task, bench, extra, allowed) in enumerate(rows, 1):
            start = time.perf_counter()
            result = suite.run(candidate, task, bench, **extra)
            row = {"candidate": candidate, "task": task, "bench": bench, "allowed": allowed, "status": result.status,
                   "stage": result.stage, "reason": result.reason, "seconds": round(time.perf_counter() - start, 2)}
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(f"[{i}/{len(rows)}] {candidate} on {task}: {result.status} [{result.stage}]", flush=True)
    return 0


def _rows(path: Path) -> dict[tuple[str, str, bool], dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["candidate"], r["task"], r["bench"]): r for r in rows if "candidate" in r}


def _words(reason: str) -> str:
    """A reason without its measured numbers (errors, times), which differ from run to run."""
    return re.sub(r"[-+]?\d[\d.e+-]*", "#", reason)


def compare(before: Path, after: Path) -> int:
    a, b = _rows(before), _rows(after)
    def same(x: dict, y: dict) -> bool:  # the same verdict, or two the suite allows (which defence fires first)
        return (x["status"], x["stage"]) == (y["status"], y["stage"]) or {x["status"], y["status"]} <= set(x["allowed"])

    moved = [k for k in a if k in b and not same(a[k], b[k])]
    other = [k for k in a if k in b and k not in moved and a[k]["status"] != b[k]["status"]]
    missing = sorted(set(a) ^ set(b))
    for k in moved:
        print(f"MOVED {k[0]} on {k[1]}: {a[k]['status']} [{a[k]['stage']}] -> {b[k]['status']} [{b[k]['stage']}]")
    for k in missing:
        print(f"ONLY IN {'before' if k in a else 'after'}: {k[0]} on {k[1]}")
    for k in other:
        print(f"another allowed verdict: {k[0]} on {k[1]}: {a[k]['status']} [{a[k]['stage']}] -> "
              f"{b[k]['status']} [{b[k]['stage']}] (the suite allows {', '.join(a[k]['allowed'])})")
    reworded = [k for k in a if k in b and k not in moved and k not in other
                and _words(a[k]["reason"]) != _words(b[k]["reason"])]
    for k in reworded:
        print(f"reason reworded, same verdict: {k[0]} on {k[1]}")
    print(f"{len(set(a) & set(b))} fixtures in both: {len(moved)} verdicts moved, {len(missing)} missing, "
          f"{len(other)} another verdict the suite allows, {len(reworded)} reasons reworded (numbers aside)")
    return 1 if moved or missing else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the snapshot here (JSON lines)")
    ap.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"), help="compare two snapshots")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        ap.error("give --out FILE or --compare BEFORE AFTER")
    return snapshot(args.out)


if __name__ == "__main__":
    sys.exit(main())
