"""The campaign's results table (markdown) from the verdicts `run.sh` saved.

Usage: python benchmarks/campaign/table.py EVALS_DIR [--out table.md]
Each row: one kernel's `warpforge agent eval` verdict on the GPU. Speedups are the harness's
(median device time, L2 flushed, fresh inputs) over eager PyTorch and over torch.compile's
default mode; "roofline fraction" is the task's roofline floor (its bytes at DRAM bandwidth or
its FLOPs at the dtype's dense peak, whichever is slower) over the kernel's time: 1.0 is at the
floor. Above 1.0 means the model's peak is not the one the kernel used (the fp32 tasks' floor
assumes the fp32 CUDA-core peak; a kernel on tensor cores, such as 3xTF32, can beat it).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

KIND = {"level1": "single op", "level2": "fusion", "level3": "block"}
# kernels whose speedup comes from removing work algebraically (the rewrite is legal for the task
# and verified on fresh inputs, but it is a different kind of win: summarised apart, as the
# CUDA-L1 review in the research notes recommends)
ALGEBRAIC = {"level2/gemm_rowsum": "sum over outputs commutes with the GEMM: a GEMV",
             "level1/diag_matmul": "diag(a) @ B as a broadcast multiply"}


def _x(v: object) -> str:
    return f"{float(v):.2f}x" if isinstance(v, (int, float)) else "-"


def _ms(v: object) -> str:
    return f"{float(v):.3f}" if isinstance(v, (int, float)) else "-"


def rows(evals: Path) -> list[dict[str, object]]:
    out = []
    for path in sorted(evals.glob("*.json")):
        d = json.loads(path.read_text())
        level = d.get("task", "").split("/")[0]
        out.append({"kernel": path.stem, "task": d.get("task"), "kind": KIND.get(level, level), "status": d["status"],
                    "speedup": d.get("speedup"), "vs_compile": d.get("speedup_vs_compile"),
                    "eager_ms": d.get("reference_ms"), "ms": d.get("candidate_ms"),
                    "compile_ms": ((d.get("timing") or {}).get("torch_compile") or {}).get("median_ms"),
                    "kernels": (d.get("kernels") or {}).get("kind"),
                    "custom_share": (d.get("kernels") or {}).get("custom_time_fraction"),
                    "roofline": (d.get("roofline") or {}).get("fraction"), "reason": d.get("reason", "")})
    return out


def table(rs: list[dict[str, object]]) -> str:
    lines = ["| task | kind | status | eager ms | torch.compile ms | kernel ms | vs eager | vs torch.compile | "
             "kernels (custom share of GPU time) | roofline fraction |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for r in sorted(rs, key=lambda r: (str(r["kind"]), str(r["task"]))):
        share = f" ({float(r['custom_share']):.0%})" if isinstance(r["custom_share"], (int, float)) else ""
        roof = f"{float(r['roofline']):.2f}" if isinstance(r["roofline"], (int, float)) else "-"
        lines.append(f"| {r['task']} | {r['kind']} | {r['status']} | {_ms(r['eager_ms'])} | {_ms(r['compile_ms'])} | "
                     f"{_ms(r['ms'])} | {_x(r['speedup'])} | {_x(r['vs_compile'])} | {r['kernels'] or '-'}{share} | {roof} |")
    ok = [r for r in rs if r["status"] in ("correct", "fast", "slow") and isinstance(r["speedup"], (int, float))]
    comp = [r for r in ok if isinstance(r["vs_compile"], (int, float))]

    def geo(vals: list[float]) -> float:
        return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")

    lines.append("")
    lines.append(f"{len(ok)} of {len(rs)} kernels verified and timed; geometric mean {geo([float(r['speedup']) for r in ok]):.2f}x "  # type: ignore[arg-type]
                 f"over eager, {geo([float(r['vs_compile']) for r in comp]):.2f}x over torch.compile "  # type: ignore[arg-type]
                 f"({sum(1 for r in comp if float(r['vs_compile']) > 1)} of {len(comp)} faster than torch.compile).")  # type: ignore[arg-type]
    rest = [r for r in ok if r["task"] not in ALGEBRAIC]
    rest_c = [r for r in rest if isinstance(r["vs_compile"], (int, float))]
    lines.append(f"Without the algebraic rewrites ({', '.join(sorted(t for t in ALGEBRAIC if any(r['task'] == t for r in ok)))}): "
                 f"{geo([float(r['speedup']) for r in rest]):.2f}x over eager, "  # type: ignore[arg-type]
                 f"{geo([float(r['vs_compile']) for r in rest_c]):.2f}x over torch.compile, {len(rest)} kernels.")  # type: ignore[arg-type]
    lines.append("")
    for r in rs:
        if r not in ok:
            lines.append(f"- {r['task']}: {r['status']}: {str(r['reason'])[:300]}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("evals", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    text = table(rows(args.evals))
    if args.out:
        args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
