"""What the OS sandbox (evaluate/jail.py) adds to an evaluation.

Three measurements, each sandboxed and unsandboxed, interleaved (A B A B ..., the order of
each pair shuffled) so drift of clocks and load falls on both:
  start    a bare child: `bwrap ... python -c pass` against `python -c pass` (process start-up);
  turn     a candidate's turnaround through a `Judge` (what a search loop sees): one Judge per
           arm, spare candidate processes started ahead as usual, the same honest candidate
           evaluated --n times each (verified and timed); the first evaluation of each Judge
           carries its start-up and is left out;
  compile  a load_inline candidate re-evaluated with a warm compile cache (sandboxed, its build
           is copied into the candidate's private cache and published back: the copies' cost).
The issue's target: under 50 ms per candidate on top of the unsandboxed turnaround.

    python benchmarks/sandbox_cost.py --out DIR [--device cpu|cuda] [--n 12]

writes DIR/sandbox_cost_<device>_<YYYY-MM-DD>.json (raw seconds, medians, hardware) and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import warpforge  # noqa: F401
except ImportError:  # a source checkout without `pip install -e .`: use src/, for the children too
    _src = str(Path(__file__).resolve().parents[1] / "src")
    sys.path.insert(0, _src)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_src, os.environ.get("PYTHONPATH")]))

from warpforge import Candidate, EvalConfig, Judge, load_task  # noqa: E402
from warpforge.evaluate import jail  # noqa: E402
from warpforge.evaluate.hardware import fingerprint  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = {"cpu": ("level1/relu", ROOT / "examples" / "relu_cpp.py"),
              "cuda": ("level1/relu", ROOT / "examples" / "relu_cuda.py")}
PLAIN = {"cpu": ROOT / "tests" / "fixtures" / "candidates" / "honest_matmul.py"}


def bare_start(sandboxed: bool) -> float:
    with tempfile.TemporaryDirectory() as work:
        env = jail.environment()
        prefix = jail.command(jail.Jail(work), env) if sandboxed else []
        t0 = time.perf_counter()
        subprocess.run([*prefix, sys.executable, "-c", "pass"], check=True, env=env, cwd=work)
        return time.perf_counter() - t0


def turnarounds(task: str, candidate: Path, device: str, size: str | None, n: int, sandboxed: bool,
                cache: str) -> list[float]:
    cfg = EvalConfig.of(device=device, size=size, sandbox=sandboxed, cache_dir=cache,  # type: ignore[arg-type]
                     compile_baseline=False)
    seconds = []
    with Judge(load_task(task), cfg) as judge:
        for i in range(n + 1):
            time.sleep(0.5)  # the idle moment a search loop has between candidates (spares start meanwhile)
            t0 = time.perf_counter()
            result = judge.evaluate(Candidate.from_file(candidate))
            if not result.correct:
                raise SystemExit(f"{candidate.name} was not accepted ({'sandboxed' if sandboxed else 'unsandboxed'}): "
                                 f"{result.reason}")
            if i:  # the first carries the Judge's start-up
                seconds.append(time.perf_counter() - t0)
    return seconds


def save(args: argparse.Namespace, raw: dict[str, dict[str, list[float]]]) -> tuple[Path, dict[str, dict[str, float]]]:
    summary = {name: {arm: statistics.median(v) for arm, v in arms.items() if v} for name, arms in raw.items()}
    for arms in summary.values():
        if len(arms) == 2:
            arms["added_ms"] = 1000 * (arms["sandboxed"] - arms["unsandboxed"])
    date = datetime.date.today().isoformat()
    record = {"date": date, "device": args.device, "size": args.size, "hardware": fingerprint(args.device),
              "bwrap": jail.bwrap_path(), "bwrap_version": subprocess.run([jail.bwrap_path(), "--version"],
                                                                         capture_output=True, text=True).stdout.strip(),
              "summary_s": summary, "raw_s": raw, "command": " ".join(["python", *sys.argv])}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"sandbox_cost_{args.device}_{date}.json"
    path.write_text(json.dumps(record, indent=1))
    return path, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--n", type=int, default=12, help="evaluations per Judge arm after its first (default 12)")
    parser.add_argument("--starts", type=int, default=30, help="bare child starts per arm (default 30)")
    parser.add_argument("--size", help="size preset (default: the task's own for the device; the sandbox's cost "
                                       "does not depend on it, so `cpu` keeps a GPU run short)")
    args = parser.parse_args()
    why = jail.problem()
    if why:
        raise SystemExit(f"sandbox_cost: {why}")
    rng = random.Random(0)
    raw: dict[str, dict[str, list[float]]] = {"start": {"sandboxed": [], "unsandboxed": []}}
    for _ in range(args.starts):
        for arm in rng.sample(["sandboxed", "unsandboxed"], 2):
            raw["start"][arm].append(bare_start(arm == "sandboxed"))
    task, compiled = CANDIDATES[args.device]
    cells = [("compile", task, compiled)]
    if args.device in PLAIN:
        cells.insert(0, ("turn", "tests/fixtures/tasks/matmul.py", PLAIN[args.device]))
    else:
        cells.insert(0, ("turn", "level1/relu", ROOT / "examples" / "gpu" / "relu__torch.py"))
    with tempfile.TemporaryDirectory() as cache:
        for name, task_name, path in cells:
            raw[name] = {"sandboxed": [], "unsandboxed": []}
            for rnd in range(2):  # two rounds of one Judge per arm, in shuffled order
                for arm in rng.sample(["sandboxed", "unsandboxed"], 2):
                    print(f"{name} round {rnd + 1}: {arm} ...", file=sys.stderr, flush=True)
                    raw[name][arm] += turnarounds(task_name, path, args.device, args.size, args.n // 2,
                                                  arm == "sandboxed", os.path.join(cache, arm))
            saved, summary = save(args, raw)  # after every cell: a run stopped by a time limit keeps what it has
    print(f"{'measurement':<10} {'sandboxed s':>12} {'unsandboxed s':>14} {'added ms':>9}")
    for name, arms in summary.items():
        if len(arms) == 3:
            print(f"{name:<10} {arms['sandboxed']:>12.3f} {arms['unsandboxed']:>14.3f} {arms['added_ms']:>9.1f}")
    print(f"wrote {saved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
