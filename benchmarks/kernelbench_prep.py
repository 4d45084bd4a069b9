"""Lay out KernelBench's tasks and CUDA-L1's released kernels for `kernelbench_gpu.sh`.

    python benchmarks/kernelbench_prep.py --kernelbench KernelBench/KernelBench \
        --cudal1 CUDA-L1/optimized_cuda_code/h100.json --out .kb

writes, under --out:
  KernelBench/level{1,2,3}/*.py   the task files, copied unchanged
  aa_order.txt                    every level 1-3 task path, a stratified sample first (--sample
                                  per level, evenly spaced by task id), then the rest
  cudal1/level{1,2,3}/*.py        the task each kernel was made for: the release's `ref_code`
                                  (an older KernelBench: smaller shapes, randn inputs), unchanged
  cudal1/L{level}_{id}.py         each released kernel (its `custom_code`), unchanged
  cudal1_order.txt                TASK:CANDIDATE pairs for `warpforge eval-batch --manifest`,
                                  the same kind of stratified sample first
  cudal1_meta.jsonl               per pair: level, id, CUDA-L1's own reported speedups, whether
                                  the release's `ref_code` equals the KernelBench checkout's file

Nothing here evaluates or times anything; it only decides which files and in what order, so an
interrupted run resumes where it stopped (the GPU script's calibrate --out and the manifest's
already-done pairs are skipped).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

LEVELS = ("level1", "level2", "level3")


def task_id(path: Path) -> int:
    return int(path.name.split("_", 1)[0])


def spread(items: list, k: int) -> list:
    """k items evenly spaced over the list (all of them when k >= len)."""
    if k >= len(items):
        return list(items)
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)] if k > 1 else items[:1]


def sample_first(groups: dict[str, list], per_level: dict[str, int]) -> list:
    """The stratified sample (evenly spaced in each group) first, then everything else in order."""
    head = [x for level, items in groups.items() for x in spread(items, per_level[level])]
    chosen = set(map(str, head))
    return head + [x for items in groups.values() for x in items if str(x) not in chosen]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernelbench", required=True, help="KernelBench's task folder (holding level1/ level2/ level3/)")
    ap.add_argument("--cudal1", help="CUDA-L1's optimized_cuda_code/h100.json (one JSON object per line)")
    ap.add_argument("--out", default=".kb")
    ap.add_argument("--sample", default="40,35,20", help="sample size per level 1,2,3 (default 40,35,20 = 95)")
    ap.add_argument("--cudal1-sample", default="20,16,8", help="sample of CUDA-L1 kernels per level (default 44)")
    args = ap.parse_args()
    src, out = Path(args.kernelbench), Path(args.out)
    files: dict[str, list[Path]] = {}
    for level in LEVELS:
        found = sorted((src / level).glob("*.py"), key=task_id)
        if not found:
            raise SystemExit(f"no task files in {src / level}: give KernelBench's KernelBench/ folder")
        (out / "KernelBench" / level).mkdir(parents=True, exist_ok=True)
        files[level] = []
        for f in found:
            dest = out / "KernelBench" / level / f.name
            shutil.copyfile(f, dest)
            files[level].append(dest)
    sizes = dict(zip(LEVELS, map(int, args.sample.split(","))))
    order = sample_first(files, sizes)
    (out / "aa_order.txt").write_text("".join(f"{p}\n" for p in order))
    print(f"{len(order)} KernelBench tasks, the first {sum(min(sizes[lv], len(files[lv])) for lv in LEVELS)} "
          f"a stratified sample -> {out / 'aa_order.txt'}")
    if args.cudal1:
        by_id = {(level, task_id(p)): p for level in LEVELS for p in files[level]}
        rows = [json.loads(line) for line in Path(args.cudal1).read_text().splitlines() if line.strip()]
        (out / "cudal1").mkdir(parents=True, exist_ok=True)
        pairs: dict[str, list[tuple[str, dict]]] = {level: [] for level in LEVELS}
        for r in sorted(rows, key=lambda r: (int(r["level_id"]), int(r["task_id"]))):
            level = f"level{r['level_id']}"
            task = by_id.get((level, int(r["task_id"])))
            if task is None:
                print(f"skipped: no KernelBench task for level {r['level_id']} id {r['task_id']}")
                continue
            if (r.get("custom_code") or "None").strip() in ("", "None"):
                print(f"skipped: CUDA-L1 released no kernel for {level}/{task.stem}")
                continue
            cand = out / "cudal1" / f"L{r['level_id']}_{r['task_id']}.py"
            cand.write_text(r["custom_code"])
            made_for = out / "cudal1" / level / task.name
            made_for.parent.mkdir(exist_ok=True)
            made_for.write_text(r["ref_code"])
            meta = {"pair": f"{made_for}:{cand}", "level": int(r["level_id"]), "id": int(r["task_id"]),
                    "task": f"{level}/{task.stem}", "ref_code_as_checkout": r["ref_code"] == task.read_text(),
                    **{k: r[k] for k in r if k.startswith("score_")}}
            pairs[level].append((meta["pair"], meta))
        chosen = sample_first(pairs, dict(zip(LEVELS, map(int, args.cudal1_sample.split(",")))))
        (out / "cudal1_order.txt").write_text("".join(f"{p}\n" for p, _ in chosen))
        with open(out / "cudal1_meta.jsonl", "w") as f:
            f.writelines(json.dumps(m) + "\n" for _, m in chosen)
        print(f"{len(chosen)} CUDA-L1 kernels -> {out / 'cudal1_order.txt'}")


if __name__ == "__main__":
    main()
