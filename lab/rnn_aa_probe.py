"""Which difference between the two processes makes a recurrent task's own program read ~0.8x
against itself on an H100 (issue 19: KernelBench's LSTM/GRU tasks, 0.79-0.82x; 1.00x on the CPU).

Each variant builds the task's model in a fresh process the way one of warpforge's processes
does, then times its forward with bench.time_calls (the evaluator's own timer) on the same
inputs; the variants differ in one thing each:
  reference     Model(*init) -> .to(device)                      (the reference process)
  state_dict    Model(*init) -> load_state_dict(theirs) -> .to() (the candidate's process)
  poisoned      reference, after filling and freeing 2 GB        (the candidate's verification)
  mmap_inputs   reference, inputs read back with torch.load(mmap=True) from a file
  candidate     state_dict + poisoned + mmap_inputs              (all three, as the candidate)
  profiled      reference, after the CUDA profiler (CUPTI) ran once in the process, as the
                candidate process's warm-up does when the profile stage will run
  teardown      profiled, with TEARDOWN_CUPTI=1 (Kineto finalizes CUPTI when a profile ends)
Each variant also reports the seconds of one profile session after its timing (profile_s):
what the profile stage costs in that process.
  env_only      reference, in a child with the sandbox's allow-listed environment (jail.environment)
  jailed        reference, in that environment inside the bubblewrap sandbox (as the candidate runs)
  jailed_cand   candidate, inside the sandbox

    python lab/rnn_aa_probe.py --out DIR [--task .kb/KernelBench/level3/40_GRUHidden.py]
writes DIR/rnn_aa_probe.json and prints each variant's median over `--runs` fresh processes.
(--device cpu runs the same on a CPU, to test the script.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

VARIANTS = ["reference", "state_dict", "poisoned", "mmap_inputs", "candidate", "profiled", "teardown", "env_only", "jailed", "jailed_cand"]
# the variants that run another variant's build in another kind of process
AS_CHILD = {"env_only": "reference", "jailed": "reference", "jailed_cand": "candidate"}


def one(task_path: str, variant: str, device: str) -> tuple[float, float]:
    """The median time of the task's forward, built as `variant` says, in this process, and the
    seconds of one profile session of it afterwards."""
    import torch

    from warpforge.evaluate import bench
    from warpforge.task import import_task_module, load_task

    task = load_task(task_path)
    module = import_task_module(task, task.sizes("gpu" if device == "cuda" else "cpu"))
    init = list(module.get_init_inputs())
    torch.manual_seed(0)
    model = module.Model(*init).eval()
    if variant in ("state_dict", "candidate"):
        theirs = {k: v.detach().clone() for k, v in model.state_dict().items()}
        torch.manual_seed(0)
        model = module.Model(*init)
        model.load_state_dict(theirs)
    model = model.to(device).eval()
    torch.manual_seed(1)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    if variant in ("mmap_inputs", "candidate"):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "inputs.pt"
            torch.save([x.cpu() if isinstance(x, torch.Tensor) else x for x in inputs], path)
            loaded = torch.load(path, weights_only=True, mmap=True)
            inputs = [x.to(device).clone() if isinstance(x, torch.Tensor) else x for x in loaded]
    if variant in ("profiled", "teardown"):
        from warpforge.evaluate.worker import _warm_up

        if variant == "teardown":
            os.environ["TEARDOWN_CUPTI"] = "1"

        _warm_up(profiler=True)
    if variant in ("poisoned", "candidate"):
        junk = torch.empty(2 << 30 if device == "cuda" else 256 << 20, dtype=torch.uint8, device=device)
        junk.fill_(0xFF)
        del junk
    with torch.no_grad():
        timing = bench.time_calls(lambda args: model(*args), lambda i: [x.clone() if isinstance(x, torch.Tensor)
                                                                          else x for x in inputs], 1, device)
        started = time.perf_counter()
        if device == "cuda":
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CUDA]):
                model(*inputs)
                torch.cuda.synchronize()
    return float(timing.median_ms), time.perf_counter() - started


def _run_variant(task: str, variant: str, device: str) -> subprocess.CompletedProcess[str]:
    """Time `variant` in a fresh process: a plain child, or one in the sandbox's environment,
    or one inside the sandbox itself (the task and this script copied into its work folder)."""
    build = AS_CHILD.get(variant, variant)
    if variant not in AS_CHILD:
        return subprocess.run([sys.executable, __file__, "--task", task, "--device", device, "--variant", build],
                              capture_output=True, text=True, check=False)
    from warpforge.evaluate import jail

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp).resolve()
        (work / "task.py").write_text(Path(task).read_text())
        (work / "probe.py").write_text(Path(__file__).read_text())
        env = jail.environment()
        src = str(Path(__file__).resolve().parents[1] / "src")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
        prefix = jail.command(jail.Jail(str(work)), env) if variant.startswith("jailed") else []
        return subprocess.run([*prefix, sys.executable, str(work / "probe.py"), "--task", str(work / "task.py"),
                               "--device", device, "--variant", build], capture_output=True, text=True,
                              check=False, env=env, cwd=str(work))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--task", default=".kb/KernelBench/level3/40_GRUHidden.py")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--only", help="comma-separated variants to run (default: all)")
    ap.add_argument("--runs", type=int, default=3, help="fresh processes per variant, taken in turn")
    ap.add_argument("--variant", choices=VARIANTS[:7], help="(internal) time one variant in this process")
    args = ap.parse_args()
    if args.variant:
        median_ms, profile_s = one(args.task, args.variant, args.device)
        print(json.dumps({"median_ms": median_ms, "profile_s": profile_s}))
        return
    chosen = args.only.split(",") if args.only else VARIANTS
    times: dict[str, list[float]] = {v: [] for v in chosen}
    profile_s: dict[str, list[float]] = {v: [] for v in chosen}
    for _ in range(args.runs):  # the variants in turn, so drift falls on all of them
        for variant in chosen:
            done = _run_variant(args.task, variant, args.device)
            if done.returncode:
                print(f"{variant}: failed: {done.stderr[-800:]}", file=sys.stderr)
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            times[variant].append(row["median_ms"])
            profile_s[variant].append(row["profile_s"])
            print(f"{variant}: {row['median_ms']:.3f} ms, profile {row['profile_s']:.1f} s", flush=True)
            _report(args, times, profile_s)  # after every process, so a run cut short keeps what it has
    for v, r in _report(args, times, profile_s).items():
        print(f"{v:12s} {r['median_ms']:9.3f} ms  reference/this {r['vs_reference']:.3f}x  "
              f"runs {[round(t, 2) for t in r['runs_ms']]}  profile s {[round(t, 1) for t in r['profile_s']]}")


def _report(args: argparse.Namespace, times: dict[str, list[float]],
            profile_s: dict[str, list[float]]) -> dict[str, dict[str, object]]:
    """Each variant's median and runs; written to OUT/rnn_aa_probe.json when --out is given."""
    base = statistics.median(times["reference"]) if times.get("reference") else float("nan")
    rows: dict[str, dict[str, object]] = {
        v: {"median_ms": statistics.median(t), "runs_ms": t, "vs_reference": base / statistics.median(t),
            "profile_s": profile_s[v]} for v, t in times.items() if t}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "rnn_aa_probe.json").write_text(json.dumps({"task": args.task, "device": args.device,
                                                                "variants": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
