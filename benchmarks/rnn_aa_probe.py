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
  env_only      reference, in a child with the sandbox's allow-listed environment (jail.environment)
  jailed        reference, in that environment inside the bubblewrap sandbox (as the candidate runs)
  jailed_cand   candidate, inside the sandbox

    python benchmarks/rnn_aa_probe.py --out DIR [--task .kb/KernelBench/level3/40_GRUHidden.py]
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

VARIANTS = ["reference", "state_dict", "poisoned", "mmap_inputs", "candidate", "env_only", "jailed", "jailed_cand"]
# the variants that run another variant's build in another kind of process
AS_CHILD = {"env_only": "reference", "jailed": "reference", "jailed_cand": "candidate"}


def one(task_path: str, variant: str, device: str) -> float:
    """The median time of the task's forward, built as `variant` says, in this process."""
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
    if variant in ("poisoned", "candidate"):
        junk = torch.empty(2 << 30 if device == "cuda" else 256 << 20, dtype=torch.uint8, device=device)
        junk.fill_(0xFF)
        del junk
    with torch.no_grad():
        timing = bench.time_calls(lambda args: model(*args), lambda i: [x.clone() if isinstance(x, torch.Tensor)
                                                                          else x for x in inputs], 1, device)
    return float(timing["median_ms"])


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
    ap.add_argument("--runs", type=int, default=3, help="fresh processes per variant, taken in turn")
    ap.add_argument("--variant", choices=VARIANTS[:5], help="(internal) time one variant in this process")
    args = ap.parse_args()
    if args.variant:
        print(json.dumps({"median_ms": one(args.task, args.variant, args.device)}))
        return
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(args.runs):  # the variants in turn, so drift falls on all of them
        for variant in VARIANTS:
            done = _run_variant(args.task, variant, args.device)
            if done.returncode:
                print(f"{variant}: failed: {done.stderr[-800:]}", file=sys.stderr)
                continue
            times[variant].append(json.loads(done.stdout.strip().splitlines()[-1])["median_ms"])
    base = statistics.median(times["reference"]) if times["reference"] else float("nan")
    rows = {v: {"median_ms": statistics.median(t), "runs_ms": t, "vs_reference": base / statistics.median(t)}
            for v, t in times.items() if t}
    for v, r in rows.items():
        print(f"{v:12s} {r['median_ms']:9.3f} ms  reference/this {r['vs_reference']:.3f}x  runs {r['runs_ms']}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "rnn_aa_probe.json").write_text(json.dumps({"task": args.task, "device": args.device,
                                                                "variants": rows}, indent=1))


if __name__ == "__main__":
    main()
