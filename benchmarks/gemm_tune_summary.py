"""The numbers docs/gemm.md quotes from tuning records: seconds per shape, verifications, and the
best configuration of each kernel family against torch.matmul (geometric mean over the shapes);
then where each family wins, by the shape's class (three classes: latency-bound under 10 µs
of torch.matmul, 10-50 µs, and the larger ones), as a markdown table.

    python benchmarks/gemm_tune_summary.py OUT/tune.jsonl [MORE.jsonl ...]   # what `gemm tune --out OUT` wrote

The tuning records behind the figures docs/gemm.md quotes are in git history, not in the tree
(benchmarks/results/README.md, "What is not kept", says how to restore them).
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from typing import Any

from warpforge import jsonl
from warpforge.metrics import geometric_mean


def family(name: str) -> str:
    for prefix in ("mma", "cutlass"):  # configuration names without a ':' (mma_..., cutlass_...)
        if name.startswith(prefix + "_"):
            return prefix
    return name.split(":", 1)[0]


# (label, upper bound of torch.matmul's time in ms) of the shape classes
CLASSES = (("under 10 µs", 0.010), ("10-50 µs", 0.050), ("50 µs and over", float("inf")))
WIN = 1.01  # a family wins a shape where its best configuration is this much faster than torch.matmul


def shape_class(torch_ms: float) -> str:
    return next(label for label, upper in CLASSES if torch_ms < upper)


def family_bests(record: dict[str, Any]) -> dict[str, float]:
    """Family -> its fastest verified configuration's speedup over torch.matmul on this shape."""
    torch_ms = record["baselines"]["torch"]["ms"]
    fastest: dict[str, float] = {}
    for c in record["candidates"]:
        if c["status"] == "ok":
            ms = (c.get("final") or c.get("screen") or c["prescreen"])["ms"]
            fastest[family(c["name"])] = min(ms, fastest.get(family(c["name"]), ms))
    return {fam: torch_ms / ms for fam, ms in fastest.items() if fam != "torch"}


def by_class(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per shape class and family: the shapes it was timed on, those it wins (its best at least
    WIN x torch.matmul), the shapes the tuner chose it for, and its best's geomean over torch."""
    rows = []
    for label, _ in CLASSES:
        members = [r for r in records if shape_class(r["baselines"]["torch"]["ms"]) == label]
        bests = [family_bests(r) for r in members]
        for fam in sorted({f for b in bests for f in b}):
            ratios = [b[fam] for b in bests if fam in b]
            rows.append({"class": label, "shapes": len(members), "family": fam, "timed": len(ratios),
                         "wins": sum(v >= WIN for v in ratios),
                         "chosen": sum(family(r["choice"]) == fam for r in members),
                         "geomean": geometric_mean(ratios), "max": max(ratios)})
    return rows


def class_markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| shapes (torch.matmul time) | family | timed on | wins (>= 1.01x) | chosen | best vs torch, geomean | max |",
             "|---|---|--:|--:|--:|--:|--:|"]
    for r in rows:
        lines.append(f"| {r['class']} ({r['shapes']}) | {r['family']} | {r['timed']} | {r['wins']} | {r['chosen']} | "
                     f"{r['geomean']:.3f}x | {r['max']:.2f}x |")
    return "\n".join(lines)


def summarize(path: str) -> None:
    records = [r for r in jsonl.read(path) if "choice" in r]  # a shape that failed has only its error
    statuses: Counter[str] = Counter()
    best: dict[str, list[float]] = defaultdict(list)
    for r in records:
        torch_ms = r["baselines"]["torch"]["ms"]
        fastest: dict[str, float] = {}
        for c in r["candidates"]:
            # a cuBLASLt reconfiguration refused for a workspace over the cap never ran: not a wrong kernel
            refused = c["status"] == "error" and "of workspace on this problem" in str(c.get("error", ""))
            statuses["refused (workspace cap)" if refused else c["status"]] += 1
            if c["status"] == "ok":
                ms = (c.get("final") or c.get("screen") or c["prescreen"])["ms"]  # prescreen: left after a first look
                fastest[family(c["name"])] = min(ms, fastest.get(family(c["name"]), ms))
        for fam, ms in fastest.items():
            best[fam].append(torch_ms / ms)
    seconds = sum(r["seconds"] for r in records)
    print(f"{path}: {len(records)} shapes, {seconds / len(records):.1f} s per shape, verifications {dict(statuses)}")
    print(f"  choices: {dict(Counter(family(r['choice']) for r in records))}")
    chosen = [r["baselines"]["torch"]["ms"] / r["choice_ms"] for r in records]
    print(f"  chosen vs torch.matmul, by the tuning's own final timing (the choice was picked on it: biased up): "
          f"geomean {geometric_mean(chosen):.3f}x")
    lt = [(r["baselines"]["cublaslt_autotuned"]["ms"] / r["choice_ms"]) for r in records
          if "cublaslt_autotuned" in r["baselines"]]
    if lt:
        print(f"  chosen vs autotuned cuBLASLt (the same record's baseline), {len(lt)} shapes: geomean "
              f"{geometric_mean(lt):.3f}x, {sum(v < 0.99 for v in lt)} below 0.99x, worst {min(lt):.3f}x")
    for fam, ratios in sorted(best.items()):
        print(f"  best {fam:15s} vs torch.matmul: geomean {geometric_mean(ratios):.2f}x, max {max(ratios):.2f}x "
              f"over {len(ratios)} shapes")
    for r in records:
        if (r["M"], r["N"], r["K"]) == (8192, 12288, 4096):
            print(f"  8192x12288x4096 torch.matmul: {r['baselines']['torch']['ms']:.3f} ms")
    print("\nwhere each family wins, by shape class:\n")
    print(class_markdown(by_class(records)))


if __name__ == "__main__":
    if not sys.argv[1:] or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if sys.argv[1:] else 2)
    for p in sys.argv[1:]:
        summarize(p)
