"""Where a GEMM tuning shape's seconds go (docs/gemm.md, "Where a shape's tuning time went"):
per shape of a tune.jsonl, its wall seconds against the GPU time its timed calls account for
(reps x median, screen and final); and, in this process, what one full garbage collection costs
with torch, Triton and the tuner imported, before and after `gc.freeze()` (each timing run starts
with one; the tuner now freezes the heap per shape).

    python lab/gemm_tune_overhead.py [TUNE.jsonl ...]
"""

from __future__ import annotations

import gc
import importlib
import json
import statistics
import sys
import time
from pathlib import Path


def collect_ms(repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def shapes(path: Path) -> None:
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if "seconds" not in r:
            continue
        gpu_ms = sum(c[k]["n"] * c[k]["ms"] for c in r["candidates"] for k in ("prescreen", "screen", "final") if k in c)
        print(f"{r['M']}x{r['N']}x{r['K']}: {r['seconds']:.2f} s, of it {gpu_ms / 1e3:.2f} s in timed calls, "
              f"{len(r['candidates'])} choices")


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    for module in ("torch", "triton", "warpforge.gemm.tune"):  # what a tuning process holds
        importlib.import_module(module)

    print(f"one gc.collect(): {collect_ms():.1f} ms over {len(gc.get_objects()):,} objects")
    gc.freeze()
    print(f"after gc.freeze(): {collect_ms():.3f} ms")
    gc.unfreeze()
    for path in sys.argv[1:]:
        shapes(Path(path))


if __name__ == "__main__":
    main()
