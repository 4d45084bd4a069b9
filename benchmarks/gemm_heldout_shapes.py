"""Held-out GEMM shapes: shapes the tuner never measures, drawn once (before the whole
grid was tuned) and committed, on which the dispatcher's choice for unmeasured shapes is judged.

Each of M, N and K is drawn log-uniformly over the cudal2 grid's range (64 to 16384) and rounded
to a multiple of 64, so the shapes are aligned like the grid's but fall between its points; a
shape with all three on grid values is drawn again. The seed is fixed, so the file is reproducible:

    python benchmarks/gemm_heldout_shapes.py --out benchmarks/gemm_heldout_cudal2.csv
    warpforge gemm bench --shapes benchmarks/gemm_heldout_cudal2.csv --table TABLE.json --modes offline

A second draw (seed 24) is for the next measurement, since the dispatcher's rule for
unmeasured shapes was changed after reading the bench on the first:

    python benchmarks/gemm_heldout_shapes.py --seed 24 --out benchmarks/gemm_heldout2_cudal2.csv
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from warpforge.gemm.shapes import CUDAL2_DIMS  # noqa: E402

SEED = 23  # the number
LO, HI, STEP = min(CUDAL2_DIMS), max(CUDAL2_DIMS), 64


def draw(n: int, seed: int = SEED) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    grid = set(CUDAL2_DIMS)
    shapes: list[tuple[int, int, int]] = []
    while len(shapes) < n:
        dims = tuple(min(HI, max(LO, STEP * round(math.exp(rng.uniform(math.log(LO), math.log(HI))) / STEP)))
                     for _ in range(3))
        if all(d in grid for d in dims) or dims in shapes:
            continue
        shapes.append(dims)  # type: ignore[arg-type]
    return shapes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=96)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["M", "N", "K"])
        w.writerows(draw(args.n, args.seed))
    print(f"wrote {args.n} held-out shapes to {args.out}")


if __name__ == "__main__":
    main()
