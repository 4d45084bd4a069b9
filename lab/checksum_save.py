"""What the zip checksum costs torch.save of GPU-sized inputs, as the evaluator's processes write
them (to tmpfs when there is one): seconds to save `--gib` GiB of float32 tensors with the checksum
on and off, median of `--reps`. Writes OUT/checksum_save_<date>.json.

  python lab/checksum_save.py --out OUT [--gib 1] [--reps 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.serialization import config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    folder = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    n = int(args.gib * 2**30 / 4 / 4)
    tensors = [torch.randn(n) for _ in range(4)]
    seconds: dict[str, list[float]] = {"crc32_on": [], "crc32_off": []}
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        for _ in range(args.reps):
            for name, flag in (("crc32_on", True), ("crc32_off", False)):
                config.save.compute_crc32 = flag
                start = time.perf_counter()
                torch.save([[t] for t in tensors], Path(tmp) / "inputs.pt")
                seconds[name].append(round(time.perf_counter() - start, 3))
                (Path(tmp) / "inputs.pt").unlink()
    report = {"date": dt.date.today().isoformat(), "torch": torch.__version__, "python": platform.python_version(),
              "cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "folder": folder or tempfile.gettempdir(),
              "gib": args.gib, "seconds": seconds, "median_s": {k: statistics.median(v) for k, v in seconds.items()}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"checksum_save_{report['date']}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["median_s"]), "saved", path)


if __name__ == "__main__":
    main()
