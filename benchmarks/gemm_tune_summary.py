"""The numbers docs/gemm.md quotes from tuning records: seconds per shape, verifications, and the
best configuration of each kernel family against torch.matmul (geometric mean over the shapes).

    python benchmarks/gemm_tune_summary.py benchmarks/results/gemm_h100-80gb-hbm3_*_tune_2026-11-23.jsonl
    python benchmarks/gemm_tune_summary.py benchmarks/results/gemm_h200_llm_tune_2026-11-23.jsonl
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict

from warpforge import jsonl
from warpforge.metrics import geometric_mean


def family(name: str) -> str:
    for prefix in ("mma", "cutlass"):  # configuration names without a ':' (mma_..., cutlass_...)
        if name.startswith(prefix + "_"):
            return prefix
    return name.split(":", 1)[0]


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
          f"geomean {geometric_mean(chosen):.2f}x")
    for fam, ratios in sorted(best.items()):
        print(f"  best {fam:15s} vs torch.matmul: geomean {geometric_mean(ratios):.2f}x, max {max(ratios):.2f}x "
              f"over {len(ratios)} shapes")
    for r in records:
        if (r["M"], r["N"], r["K"]) == (8192, 12288, 4096):
            print(f"  8192x12288x4096 torch.matmul: {r['baselines']['torch']['ms']:.3f} ms")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        summarize(p)
