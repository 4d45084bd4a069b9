"""One picture of the A/A results: each task's own program against itself, speedup (log axis,
1x dashed) against the task's time, one colour per run. Identical code should sit on the line;
how far it strays at each task length is the harness's measured timing error.

    python benchmarks/aa_plot.py docs/img/aa_speedups.svg \
        "H100 before=benchmarks/results/kernelbench_h100_2026-11-25/run1-2_aa_suite_before_sync_floor.jsonl" \
        "H100 idle floor=benchmarks/results/kernelbench_h100_2026-11-25/run3_aa_suite_idle_floor.jsonl,benchmarks/results/kernelbench_h100_2026-11-25/run3_aa_suite_b_idle_floor.jsonl" \
        "H100 now=benchmarks/results/kernelbench_h100_2026-11-25/aa_suite.jsonl,benchmarks/results/kernelbench_h100_2026-11-25/aa_suite_b.jsonl" \
        "H100 KernelBench=benchmarks/results/kernelbench_h100_2026-11-25/aa_kernelbench*.jsonl" \
        "CPU idle=benchmarks/results/cpu_aa_2026-11-25_s11/aa_cpu_idle.jsonl" \
        "CPU loaded=benchmarks/results/cpu_aa_2026-11-25_s11/aa_cpu_loaded.jsonl"

writes a standalone SVG (the report's dot plot, with its styles inlined). A file may be a glob
(expanded in sorted order); within a series a task's last row counts, as in kernelbench_summary.py.
"""

from __future__ import annotations

import glob
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from warpforge import jsonl  # noqa: E402
from warpforge.report.plots import Point, dot_plot  # noqa: E402

STYLE = ("<style>text { font: 11px sans-serif; fill: #222; } .tick { fill: #666; } .grid { stroke: #eceef2; } "
         ".axis { stroke: #9aa0ab; } .baseline { stroke: #777; stroke-dasharray: 4 3; }</style>")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    out, series = Path(sys.argv[1]), []
    for arg in sys.argv[2:]:
        name, _, files = arg.partition("=")
        paths = [g for f in files.split(",") for g in (sorted(glob.glob(f)) if "*" in f else [f])]
        rows = list({r["task"]: r for f in paths for r in jsonl.read(f)}.values())
        points = [Point(r["reference_ms"], r["speedup"], f"{r['task']}: {r['speedup']:.3f}x")
                  for r in rows if r.get("speedup") and r.get("reference_ms")]
        series.append((f"{name} ({len(points)})", points))
    svg = str(dot_plot(series, x_label="the task's time (ms)", width=720, height=360))
    svg = svg.replace('role="img">', f'role="img">{STYLE}', 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(svg + "\n")
    print(f"wrote {out}: {', '.join(name for name, _ in series)}")


if __name__ == "__main__":
    main()
