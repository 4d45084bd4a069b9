"""The KernelBench campaign's sample, chosen before any run: N tasks per KernelBench level, drawn with a
fixed seed from the tasks of a KernelBench checkout, stratified by level and, within a level,
spread over the kinds of task (the first word of the task's name after its number: Matmul,
Conv2d, ReLU, ...) so that no kind is drawn twice before every kind has been drawn once.

    python benchmarks/kernelbench_sample.py .kb/KernelBench --per-level 10 --seed 22 \
        --cudal1-meta .kb/cudal1_meta.jsonl --out benchmarks/results/kernelbench_campaign_sample.json

Writes the sample (task names and file paths relative to the checkout) with the seed, the
checkout's task count per level, and for each task whether CUDA-L1 released an H100 kernel for
it (from kernelbench_prep.py's metadata), so the side-by-side table knows which it can fill.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import re
from collections import defaultdict
from pathlib import Path


def kind(stem: str) -> str:
    """'19_ReLU' -> 'relu'; '1_Conv2D_ReLU_BiasAdd' -> 'conv2d'; '35_LSTM' -> 'lstm'."""
    words = stem.split("_", 1)[-1].split("_")
    return re.sub(r"[^a-z0-9]", "", words[0].lower()) or stem


def draw(stems: list[str], n: int, rng: random.Random) -> list[str]:
    """`n` of `stems`: kinds in a seeded order, one task of each kind per pass, until n."""
    by_kind: dict[str, list[str]] = defaultdict(list)
    for stem in sorted(stems):
        by_kind[kind(stem)].append(stem)
    for tasks in by_kind.values():
        rng.shuffle(tasks)
    kinds = sorted(by_kind)
    rng.shuffle(kinds)
    picked: list[str] = []
    while len(picked) < min(n, len(stems)):
        for k in kinds:
            if by_kind[k] and len(picked) < n:
                picked.append(by_kind[k].pop())
    return picked


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="a KernelBench checkout's KernelBench/ folder (level1/, level2/, level3/)")
    ap.add_argument("--per-level", type=int, default=10)
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--cudal1-meta", help="kernelbench_prep.py's cudal1_meta.jsonl (which tasks have a released kernel)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    root = Path(args.root)
    released = set()
    if args.cudal1_meta:
        released = {json.loads(line)["task"] for line in Path(args.cudal1_meta).read_text().splitlines() if line}
    rng = random.Random(args.seed)
    levels = sorted(p.name for p in root.iterdir() if p.is_dir() and re.fullmatch(r"level\d+", p.name))
    sample, counts = [], {}
    for level in levels:
        stems = [p.stem for p in (root / level).glob("*.py") if not p.name.startswith("_")]
        counts[level] = len(stems)
        for stem in draw(stems, args.per_level, rng):
            sample.append({"task": f"{level}/{stem}", "path": f"{level}/{stem}.py", "kind": kind(stem),
                           "cudal1_kernel": f"{level}/{stem}" in released if released else None})
    out = {"date": dt.date.today().isoformat(), "seed": args.seed, "per_level": args.per_level,
           "checkout_tasks": counts, "command": " ".join(["python benchmarks/kernelbench_sample.py", args.root,
                                                           "--per-level", str(args.per_level), "--seed",
                                                           str(args.seed)]),
           "tasks": sample}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    for row in sample:
        print(f"{row['task']:70s} {row['kind']:14s} CUDA-L1: {row['cudal1_kernel']}")


if __name__ == "__main__":
    main()
