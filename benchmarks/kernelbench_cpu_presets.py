"""How many of KernelBench's tasks the derived CPU presets (evaluate/presets.py) make runnable on
a CPU: for each task file of a KernelBench tree, import it, scale its globals down as the
reference process does (fit_globals, 4 MiB), then build the model and run one forward on real
CPU inputs, with a time limit per task.

    python benchmarks/kernelbench_cpu_presets.py .kb/KernelBench --out benchmarks/results/kernelbench_cpu_presets_DATE.json

Per task it records the factor, the bytes before and after, whether the forward ran and how long
it took (one call, float32, after the model is built), or the error. It runs the tasks' own code
(KernelBench's, trusted), in this process, one task after the other.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

from warpforge.evaluate.presets import CPU_BYTES, fit_globals  # noqa: E402
from warpforge.task import import_task_module, load_task, suite_paths  # noqa: E402


class _TimeUp(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _TimeUp()


def one(path: Path, limit_s: int) -> dict:
    row: dict = {"task": f"{path.parent.name}/{path.stem}"}
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit_s)
    try:
        module = import_task_module(load_task(path))
        scaled, note = fit_globals(module, CPU_BYTES)
        row.update(scaled=scaled, note=note)
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs()).eval()
        inputs = module.get_inputs()
        row["input_mib"] = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor)) / 2**20
        started = time.perf_counter()
        with torch.no_grad():
            model(*inputs)
        row.update(ran=True, forward_s=round(time.perf_counter() - started, 4))
    except _TimeUp:
        row.update(ran=False, error=f"over {limit_s} s")
    except Exception as exc:  # the task's own code: any error is a row
        row.update(ran=False, error=f"{type(exc).__name__}: {str(exc)[:200]}")
    finally:
        signal.alarm(0)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="a KernelBench tree: its level1/, level2/... folders")
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit-s", type=int, default=30, help="per task: import, scale, build and one forward")
    args = ap.parse_args()
    torch.set_num_threads(2)
    rows = []
    for path in suite_paths(Path(args.root)):
        rows.append(one(path, args.limit_s))
        r = rows[-1]
        print(f"{r['task']:70s} {'ran' if r.get('ran') else 'FAILED'} {r.get('forward_s', r.get('error', ''))}",
              flush=True)
    scaled = [r for r in rows if r.get("scaled")]
    summary = {
        "tasks": len(rows), "ran": sum(bool(r.get("ran")) for r in rows), "scaled": len(scaled),
        "ran_scaled": sum(bool(r.get("ran")) for r in scaled),
        "not_scaled_over_budget": [r["task"] for r in rows if r.get("note") and not r.get("scaled")],
        "failed": [r["task"] for r in rows if not r.get("ran")],
        "forward_s_max": max((r.get("forward_s", 0.0) for r in rows), default=None),
    }
    out = {"date": dt.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
           "torch": torch.__version__, "threads": torch.get_num_threads(), "budget_bytes": CPU_BYTES,
           "summary": summary, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
