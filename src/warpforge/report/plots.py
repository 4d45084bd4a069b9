"""Inline SVG charts for the HTML report: a stacked bar chart and a speedup-over-attempts scatter.

Each function returns a `Markup` string (an `<svg>` element) ready to drop into a page, so the
report needs no plotting library and no network when viewed. Every label is escaped here; the
callers pass plain data. Styling (fonts, colours of classes) lives in the page's CSS.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

# Okabe & Ito (2008) colour-blind-safe palette, one colour per outcome; unknown statuses are grey.
STATUS_COLORS: dict[str, str] = {
    "correct": "#009E73",
    "incorrect": "#E69F00",
    "compile_error": "#D55E00",
    "runtime_error": "#CC79A7",
    "timeout": "#56B4E9",
    "crashed": "#0072B2",
    "rejected": "#332288",
    "no_candidate": "#999999",
    "not_evaluated": "#D9D9D9",
}
OTHER_COLOR = "#BBBBBB"

# Above this max/min ratio the speedup axis is logarithmic: a 0.05x..40x spread on a linear
# axis squeezes every slow attempt onto the floor.
LOG_AXIS_RATIO = 20.0


def _num(v: float) -> str:
    return f"{v:.1f}"


def stacked_bars(rows: Sequence[tuple[str, Mapping[str, int]]], order: Sequence[str], width: int = 640) -> Markup:
    """Horizontal bars, one per row label, split into segments by key (in `order`, then the
    rest alphabetically), with a legend of the keys that occur and the total at each bar's end."""
    keys = [k for k in order if any(counts.get(k) for _, counts in rows)]
    keys += sorted({k for _, counts in rows for k, n in counts.items() if n and k not in keys})
    label_w, total_w, bar_h, gap, legend_h = 110, 48, 20, 8, 24 * math.ceil(max(len(keys), 1) / 4)
    plot_w = width - label_w - total_w
    height = legend_h + len(rows) * (bar_h + gap) + gap
    biggest = max((sum(c.values()) for _, c in rows), default=0) or 1
    out = [f'<svg class="chart bars" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img">']
    for i, key in enumerate(keys):
        x, y = label_w + (i % 4) * (plot_w + total_w) / 4, 6 + 24 * (i // 4)
        out.append(f'<rect class="swatch" x="{_num(x)}" y="{y}" width="12" height="12" '
                   f'fill="{STATUS_COLORS.get(key, OTHER_COLOR)}"/>'
                   f'<text x="{_num(x + 16)}" y="{y + 10}">{escape(key)}</text>')
    for r, (label, counts) in enumerate(rows):
        y = legend_h + gap + r * (bar_h + gap)
        out.append(f'<text class="label" x="{label_w - 6}" y="{y + 14}" text-anchor="end">{escape(label)}</text>')
        x = float(label_w)
        for key in keys:
            n = counts.get(key, 0)
            if not n:
                continue
            w = plot_w * n / biggest
            out.append(f'<rect class="seg" data-key="{escape(key)}" x="{_num(x)}" y="{y}" width="{_num(w)}" '
                       f'height="{bar_h}" fill="{STATUS_COLORS.get(key, OTHER_COLOR)}">'
                       f'<title>{escape(label)}: {escape(key)} {n}</title></rect>')
            x += w
        out.append(f'<text class="total" x="{_num(x + 6)}" y="{y + 14}">{sum(counts.values())}</text>')
    out.append("</svg>")
    return Markup("".join(out))


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    label: str
    """Tooltip text (escaped when drawn)."""


class _Axis:
    """Maps data values to pixels on a linear or log10 scale and picks readable ticks."""

    def __init__(self, lo: float, hi: float, px_lo: float, px_hi: float, log: bool):
        self.log = log
        if log:
            lo, hi = math.log10(lo), math.log10(hi)
        if hi - lo < 1e-9:
            lo, hi = lo - 0.5, hi + 0.5
        pad = (hi - lo) * 0.05
        self.lo, self.hi, self.px_lo, self.px_hi = lo - pad, hi + pad, px_lo, px_hi

    def __call__(self, v: float) -> float:
        t = math.log10(v) if self.log else v
        return self.px_lo + (t - self.lo) / (self.hi - self.lo) * (self.px_hi - self.px_lo)

    def ticks(self) -> list[float]:
        if self.log:
            decades = range(math.floor(self.lo), math.ceil(self.hi) + 1)
            steps = (1.0,) if self.hi - self.lo > 3 else (1.0, 2.0, 5.0)
            vals = [m * 10.0 ** d for d in decades for m in steps]
            return [v for v in vals if self.lo <= math.log10(v) <= self.hi]
        raw = (self.hi - self.lo) / 5
        step = 10 ** math.floor(math.log10(raw))
        step *= next(m for m in (1, 2, 5, 10) if m * step >= raw)
        first = math.ceil(self.lo / step)
        return [k * step for k in range(first, math.floor(self.hi / step) + 1)]


def speedup_scatter(points: Sequence[Point], failed_x: Sequence[float], x_range: tuple[float, float],
                    x_label: str = "step", width: int = 640, height: int = 300) -> Markup:
    """Speedup of correct attempts (one circle each) against the attempt's position, the
    best-so-far as a step line, a dashed line at 1x (eager PyTorch), and a tick per failed
    attempt in a strip under the axis. Needs at least one point."""
    if not points:
        raise ValueError("speedup_scatter needs at least one point")
    left, right, top, bottom = 52, 14, 12, 58
    ys = [p.y for p in points] + [1.0]
    log = max(ys) / min(ys) > LOG_AXIS_RATIO
    xa = _Axis(x_range[0], x_range[1], left, width - right, log=False)
    ya = _Axis(min(ys), max(ys), height - bottom, top, log=log)
    out = [f'<svg class="chart scatter" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" data-log-y="{str(log).lower()}">']
    for v in ya.ticks():
        py = _num(ya(v))
        out.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{py}" y2="{py}"/>'
                   f'<text class="tick" x="{left - 6}" y="{py}" dy="4" text-anchor="end">{v:g}×</text>')
    for v in xa.ticks():
        if v == int(v):  # attempts are whole steps
            out.append(f'<text class="tick" x="{_num(xa(v))}" y="{height - bottom + 16}" '
                       f'text-anchor="middle">{int(v)}</text>')
    one = _num(ya(1.0))
    out.append(f'<line class="baseline" x1="{left}" x2="{width - right}" y1="{one}" y2="{one}"/>')
    out.append(f'<line class="axis" x1="{left}" x2="{width - right}" y1="{height - bottom}" y2="{height - bottom}"/>'
               f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{height - bottom}"/>')
    ordered = sorted(points, key=lambda p: p.x)
    best = ordered[0].y
    path = [f"M{_num(xa(ordered[0].x))} {_num(ya(best))}"]
    for p in ordered[1:]:
        if p.y > best:  # across to the improving attempt, then up to its speedup
            path.append(f"H{_num(xa(p.x))} V{_num(ya(p.y))}")
            best = p.y
    path.append(f"H{_num(xa(x_range[1]))}")
    out.append(f'<path class="best" d="{" ".join(path)}"/>')
    for p in points:
        out.append(f'<circle class="point" cx="{_num(xa(p.x))}" cy="{_num(ya(p.y))}" r="3.5">'
                   f'<title>{escape(p.label)}</title></circle>')
    strip = height - bottom + 26
    for fx in failed_x:
        out.append(f'<line class="fail" x1="{_num(xa(fx))}" x2="{_num(xa(fx))}" y1="{strip}" y2="{strip + 10}"/>')
    out.append(f'<text class="note" x="{left - 6}" y="{strip + 9}" text-anchor="end">failed</text>'
               f'<text class="note" x="{(left + width - right) / 2}" y="{height - 4}" text-anchor="middle">'
               f'{escape(x_label)}</text></svg>')
    return Markup("".join(out))
