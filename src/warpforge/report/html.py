"""`warpforge report ARCHIVE --out DIR`: a static, self-contained HTML site of an archive.

Writes index.html (leaderboard, geometric mean, custom-kernel vs PyTorch-rewrite split, failure
mix, runs) and tasks/<name>.html (best kernel, diff to its parent, lineage, speedup over attempts,
every attempt) from what pages.py reads through `warpforge.archive`, opened read-only. Pages carry
their CSS and SVG charts inline: no network when viewed. Everything from the archive is LLM output
or derived from it, so the templates escape every value (jinja2 autoescape); only the SVG that
plots.py builds is inserted as markup. It does not write to the archive, run candidates, or re-time anything.
"""

from __future__ import annotations

import argparse
import math
import time
from datetime import UTC, datetime
from pathlib import Path

import jinja2

from warpforge.errors import UsageError
from warpforge.report import plots
from warpforge.report.pages import (index_context, positive, read_archive, reason_of, review_of, stage_of, status_of,
                                    task_context, unsandboxed_runs)


def _speedup(v: float | None) -> str:
    v = positive(v)
    return "—" if v is None else f"{v:.3g}×" if v < 1000 else f"{v:,.0f}×"


def _ms(v: float | None) -> str:
    v = positive(v)
    return "—" if v is None else f"{v:.4g} ms"


def _when(t: object) -> str:
    if not isinstance(t, int | float) or not math.isfinite(t):
        return "—" if t is None else str(t)
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("warpforge.report", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(status_of=status_of, stage_of=stage_of, reason_of=reason_of, review_of=review_of,
                       speedup=_speedup, claim=lambda a: a.claim.words(), when=_when, ms=_ms, count=lambda v: f"{v:,}",
                       usd=lambda v: f"${v:,.2f}" if v >= 0.01 or not v else f"${v:.4f}",
                       pct=lambda n, d: f"{100 * n / d:.0f}%" if d else "—",
                       clip=lambda s, n=240: s if len(s) <= n else s[: n - 1] + "…")
    return env


def write_report(archive_path: str | Path, out_dir: str | Path) -> Path:
    """Write index.html and tasks/<name>.html for the archive under out_dir; return index.html's path."""
    view = read_archive(Path(archive_path))
    out = Path(out_dir)
    try:
        (out / "tasks").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the report folder {out} ({exc.strerror}): pick a writable --out") from None
    env = environment()
    common = {"view": view, "generated": time.time(), "status_colors": plots.STATUS_COLORS,
              "unsandboxed": unsandboxed_runs(view)}
    for task in view.tasks:
        page = env.get_template("task.html").render(**common, **task_context(view, task), root="../")
        (out / "tasks" / task.page).write_text(page, encoding="utf-8")
    index = out / "index.html"
    index.write_text(env.get_template("index.html").render(**common, **index_context(view), root=""), encoding="utf-8")
    return index


def add_report_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="write a static HTML report of an archive",
                       description="Write a self-contained HTML site (leaderboard, one page per task) of ARCHIVE.")
    p.add_argument("archive", help="the SQLite archive that warpforge optimize wrote")
    p.add_argument("--out", required=True, help="folder to write index.html and tasks/ into (created if missing)")


def cmd_report(args: argparse.Namespace) -> int:
    print(write_report(args.archive, args.out))
    return 0
