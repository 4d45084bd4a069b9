"""Sample one GPU's memory while something runs, by process role, and print the peaks as JSON.

Issue 21's memory target is about the evaluator's footprint on one GPU: the reference process
(`warpforge.evaluate.reference`), the candidate's process (`warpforge.evaluate.worker`) and the
parent (the CLI, which compares outputs on the GPU). nvidia-smi lists each process's memory with
its host PID; the role is read from that PID's command line. Runs until SIGTERM or SIGINT, then
prints {"peak_used_mib", "peak_by_role_mib", "peak_sum_by_role_mib", "samples"} on stdout.

Usage (lab/memory_peak.sh): python lab/gpu_memory_sampler.py --gpu 0 [--interval-ms 50] &
"""
from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

ROLES = (("warpforge.evaluate.reference", "reference"), ("warpforge.evaluate.worker", "candidate"))


def role(pid: int) -> str:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    return next((name for marker, name in ROLES if marker in cmdline), "parent" if "warpforge" in cmdline else "other")


def query(gpu: str, what: str, fields: str) -> list[list[str]]:
    out = subprocess.run(["nvidia-smi", "-i", gpu, f"--query-{what}={fields}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=10).stdout
    return [[f.strip() for f in line.split(",")] for line in out.splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="0", help="the GPU's index as nvidia-smi counts them")
    parser.add_argument("--interval-ms", type=float, default=50.0)
    args = parser.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    peak_used, by_role, peak_sum, samples = 0.0, {}, {}, 0
    roles: dict[int, str] = {}
    while not stop:
        try:
            used = float(query(args.gpu, "gpu", "memory.used")[0][0])
            apps = query(args.gpu, "compute-apps", "pid,used_memory")
        except (OSError, subprocess.SubprocessError, IndexError, ValueError):
            time.sleep(args.interval_ms / 1e3)
            continue
        samples += 1
        peak_used = max(peak_used, used)
        now: dict[str, float] = {}
        for pid_text, mib in apps:
            try:
                pid, mem = int(pid_text), float(mib)
            except ValueError:
                continue
            name = roles.setdefault(pid, role(pid))
            by_role[name] = max(by_role.get(name, 0.0), mem)
            now[name] = now.get(name, 0.0) + mem
        for name, mem in now.items():
            peak_sum[name] = max(peak_sum.get(name, 0.0), mem)
        time.sleep(args.interval_ms / 1e3)
    json.dump({"peak_used_mib": peak_used, "peak_by_role_mib": by_role, "peak_sum_by_role_mib": peak_sum,
               "samples": samples}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
