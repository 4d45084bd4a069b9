"""Inline SVG charts for the HTML reports: a stacked bar chart, a speedup-over-attempts scatter,
and, for ratio data such as per-shape speedups, a diverging log colour scale, a heat map, a
histogram on a log axis and a dot plot of labelled series.

Each function returns a `Markup` string (an `<svg>` element) ready to drop into a page, so the
report needs no plotting library and no network when viewed. Every label is escaped here; the
callers pass plain data. Styling (fonts, colours of classes) lives in the page's CSS.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
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
    "task_error": "#882255",
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


# Ratio charts (speedups around 1x). Okabe & Ito colours again, so that slower and faster read
# the same in every chart: vermillion below 1x, blue above, near-white at exactly 1x.
SLOWER_COLOR = "#D55E00"
FASTER_COLOR = "#0072B2"
NEUTRAL_COLOR = "#F4F4F4"
MISSING_COLOR = "#E4E4E4"

# Okabe & Ito's categorical colours without the yellow (too faint on white), one per series;
# series beyond these are drawn in OTHER_COLOR.
SERIES_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000")

# Tick values of ratio axes in the order they are tried: round values first, then the ones
# near 1x where most speedups sit; a value is skipped when its label would touch a kept one.
RATIO_TICKS = (1.0, 2.0, 0.5, 10.0, 0.1, 100.0, 0.01, 5.0, 0.2, 1.5, 0.8, 1.25, 1.1, 0.9, 3.0, 0.25,
               20.0, 50.0, 0.05, 0.02)


def _mix(a: str, b: str, t: float) -> str:
    """The colour a fraction t of the way from hex colour a to hex colour b, in sRGB."""
    ca, cb = ([int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in (a, b))
    return "#" + "".join(f"{round(x + (y - x) * t):02X}" for x, y in zip(ca, cb))


def _ratio_ticks(lo: float, hi: float, at: Callable[[float], float], min_gap: float = 26.0) -> list[float]:
    """RATIO_TICKS between lo and hi whose labels, at pixel at(v), stay min_gap apart."""
    kept: list[float] = []
    for v in RATIO_TICKS:
        if lo <= v <= hi and all(abs(at(v) - at(k)) >= min_gap for k in kept):
            kept.append(v)
    return sorted(kept)


def _axis_ratio_ticks(axis: _Axis, min_gap: float = 26.0) -> list[float]:
    return _ratio_ticks(10 ** axis.lo, 10 ** axis.hi, axis, min_gap)


def _count_label(v: float) -> str:
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


@dataclass(frozen=True)
class RatioScale:
    """Colours a ratio on a log scale that diverges at 1: below 1 towards SLOWER_COLOR, above
    towards FASTER_COLOR, full colour at 1/limit and limit and beyond (0.5x is as strong as 2x)."""

    limit: float

    @classmethod
    def fit(cls, values: Iterable[float], least: float = 1.25, most: float = 10.0) -> RatioScale:
        """Symmetric to the most extreme value, clamped to [least, most]: a run of near-1x values
        should not paint timing noise in full colour, nor one outlier wash out the rest."""
        spread = max((max(v, 1 / v) for v in values if v > 0), default=least)
        return cls(min(max(spread, least), most))

    def strength(self, v: float) -> float:
        """-1 (1/limit or slower) .. 0 (1x) .. 1 (limit or faster)."""
        return max(-1.0, min(1.0, math.log(v) / math.log(self.limit)))

    def __call__(self, v: float) -> str:
        s = self.strength(v)
        return _mix(NEUTRAL_COLOR, FASTER_COLOR if s > 0 else SLOWER_COLOR, abs(s))


def ratio_legend(scale: RatioScale, width: int = 320) -> Markup:
    """A colour bar for `scale` from 1/limit to limit, with ticks and 'slower' / 'faster' ends."""
    left, bar_w, steps = 20, width - 40, 48
    out = [f'<svg class="chart legend-bar" xmlns="http://www.w3.org/2000/svg" width="{width}" height="46" '
           f'viewBox="0 0 {width} 46" role="img">'
           f'<text class="note" x="{left}" y="11">◀ slower</text>'
           f'<text class="note" x="{left + bar_w}" y="11" text-anchor="end">faster ▶</text>']
    for i in range(steps):
        v = scale.limit ** (2 * (i + 0.5) / steps - 1)
        out.append(f'<rect x="{_num(left + i * bar_w / steps)}" y="16" width="{_num(bar_w / steps + 0.6)}" '
                   f'height="12" fill="{scale(v)}"/>')
    def at(v: float) -> float:
        return left + (math.log(v) / math.log(scale.limit) + 1) / 2 * bar_w

    for v in _ratio_ticks(1 / scale.limit, scale.limit, at, 34):
        x = _num(at(v))
        out.append(f'<line class="axis" x1="{x}" x2="{x}" y1="28" y2="32"/>'
                   f'<text class="tick" x="{x}" y="43" text-anchor="middle">{v:g}×</text>')
    out.append("</svg>")
    return Markup("".join(out))


def heat_map(row_labels: Sequence[str], col_labels: Sequence[str], cells: Mapping[tuple[int, int], tuple[float, str]],
             scale: RatioScale, title: str = "", corner: str = "", cell_px: int = 28) -> Markup:
    """A grid of cells coloured by `scale`, keyed (row, column) to (value, tooltip); rows run top
    to bottom, columns left to right. Positions with no entry are hatched grey ('not measured').
    Values are written in the cells when the cells are wide enough to hold them."""
    left, top = 46, 36
    width, height = left + len(col_labels) * cell_px + 4, top + len(row_labels) * cell_px + 4
    out = [f'<svg class="chart heat" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img">'
           f'<text class="title" x="2" y="12">{escape(title)}</text>'
           f'<text class="note" x="{left - 5}" y="30" text-anchor="end">{escape(corner)}</text>']
    for c, label in enumerate(col_labels):
        out.append(f'<text class="tick" x="{_num(left + (c + 0.5) * cell_px)}" y="30" '
                   f'text-anchor="middle">{escape(label)}</text>')
    for r, label in enumerate(row_labels):
        y = top + r * cell_px
        out.append(f'<text class="tick" x="{left - 5}" y="{_num(y + cell_px / 2 + 4)}" text-anchor="end">'
                   f'{escape(label)}</text>')
        for c, col in enumerate(col_labels):
            x, size = left + c * cell_px, cell_px - 1
            if (r, c) not in cells:
                out.append(f'<g class="cell missing"><title>{escape(label)} × {escape(col)}: not measured</title>'
                           f'<rect x="{x}" y="{y}" width="{size}" height="{size}" fill="{MISSING_COLOR}"/>'
                           f'<path d="M{x} {y + size}L{x + size} {y}" stroke="#BDBDBD"/></g>')
                continue
            value, tip = cells[(r, c)]
            out.append(f'<g class="cell"><title>{escape(tip)}</title>'
                       f'<rect x="{x}" y="{y}" width="{size}" height="{size}" fill="{scale(value)}"/>')
            if cell_px >= 24:  # "1.09" in 9px type needs about 20px
                ink = "#FFFFFF" if abs(scale.strength(value)) > 0.55 else "#1D2230"
                out.append(f'<text class="v" x="{_num(x + size / 2)}" y="{_num(y + size / 2 + 3)}" '
                           f'text-anchor="middle" style="fill:{ink};font-size:9px">{value:.2f}</text>')
            out.append("</g>")
    out.append("</svg>")
    return Markup("".join(out))


def ratio_histogram(values: Sequence[float], lo: float, hi: float, title: str = "", bins: int = 24,
                    width: int = 380, height: int = 170) -> Markup:
    """How many ratios fall in each of about `bins` equal steps of log(ratio) from lo to hi (values
    beyond go to the end bins). One bin is centred on 1x and drawn grey (ties: a ratio of exactly 1
    is common), bars below it in SLOWER_COLOR, above in FASTER_COLOR. The range is widened to hold
    1x; pass the same lo and hi to histograms meant to be compared. Values must be positive."""
    lo, hi = min(lo, 1.0), max(hi, 1.0)
    lo, hi = (lo / 1.1, hi * 1.1) if hi <= lo else (lo, hi)
    step = (math.log(hi) - math.log(lo)) / bins

    def bin_of(v: float) -> int:  # bin j holds log(v) in [(j - 0.5) step, (j + 0.5) step): bin 0 is centred on 1x
        return math.floor(math.log(v) / step + 0.5)

    first, n_bins = bin_of(lo), bin_of(hi) - bin_of(lo) + 1
    counts = [0] * n_bins
    for v in values:
        counts[min(max(bin_of(v) - first, 0), n_bins - 1)] += 1
    edges = [math.exp((first + i - 0.5) * step) for i in range(n_bins + 1)]
    left, right, top, bottom = 36, 10, 20, 22
    xa = _Axis(edges[0], edges[-1], left, width - right, log=True)
    ya = _Axis(0, max(max(counts), 1), height - bottom, top, log=False)
    out = [f'<svg class="chart hist" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img">'
           f'<text class="title" x="2" y="12">{escape(title)}</text>']
    for v in ya.ticks():
        if v >= 0 and v == int(v):
            out.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{_num(ya(v))}" y2="{_num(ya(v))}"/>'
                       f'<text class="tick" x="{left - 5}" y="{_num(ya(v) + 4)}" text-anchor="end">{int(v)}</text>')
    for i, n in enumerate(counts):
        if not n:
            continue
        a, b = edges[i], edges[i + 1]
        fill = OTHER_COLOR if first + i == 0 else SLOWER_COLOR if first + i < 0 else FASTER_COLOR
        out.append(f'<rect class="bar" x="{_num(xa(a))}" y="{_num(ya(n))}" width="{_num(xa(b) - xa(a) - 1)}" '
                   f'height="{_num(ya(0) - ya(n))}" fill="{fill}"><title>{a:.3g}×–{b:.3g}×: {n}</title></rect>')
    for v in _axis_ratio_ticks(xa, 30):
        out.append(f'<text class="tick" x="{_num(xa(v))}" y="{height - 6}" text-anchor="middle">{v:g}×</text>')
    one = _num(xa(1.0))
    out.append(f'<line class="baseline" x1="{one}" x2="{one}" y1="{top}" y2="{height - bottom}"/>'
               f'<line class="axis" x1="{left}" x2="{width - right}" y1="{_num(ya(0))}" y2="{_num(ya(0))}"/></svg>')
    return Markup("".join(out))


def dot_plot(series: Sequence[tuple[str, Sequence[Point]]], x_label: str = "", width: int = 640,
             height: int = 320) -> Markup:
    """Ratios (y, log axis, dashed line at 1x) against a positive x on a log axis, one colour per
    series with a legend (series past SERIES_COLORS are grey). Points of different series at the
    same x are dodged sideways so that they do not hide each other. Needs at least one point."""
    points = [p for _, ps in series for p in ps]
    if not points:
        raise ValueError("dot_plot needs at least one point")
    legend_h = 22 * math.ceil(len(series) / 4)
    left, right, top, bottom = 52, 14, legend_h + 10, 40
    xa = _Axis(min(p.x for p in points), max(p.x for p in points), left, width - right, log=True)
    ys = [p.y for p in points] + [1.0]
    ya = _Axis(min(ys), max(ys), height - bottom, top, log=True)
    out = [f'<svg class="chart dots" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img">']
    colors = [SERIES_COLORS[i] if i < len(SERIES_COLORS) else OTHER_COLOR for i in range(len(series))]
    for i, (name, _) in enumerate(series):
        x, y = left + (i % 4) * (width - left - right) / 4, 4 + 22 * (i // 4)
        out.append(f'<circle cx="{_num(x + 6)}" cy="{y + 6}" r="5" fill="{colors[i]}"/>'
                   f'<text x="{_num(x + 16)}" y="{y + 10}">{escape(name)}</text>')
    for v in _axis_ratio_ticks(ya):
        py = _num(ya(v))
        out.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{py}" y2="{py}"/>'
                   f'<text class="tick" x="{left - 6}" y="{py}" dy="4" text-anchor="end">{v:g}×</text>')
    for v in xa.ticks():
        out.append(f'<text class="tick" x="{_num(xa(v))}" y="{height - bottom + 16}" '
                   f'text-anchor="middle">{_count_label(v)}</text>')
    one = _num(ya(1.0))
    out.append(f'<line class="baseline" x1="{left}" x2="{width - right}" y1="{one}" y2="{one}"/>'
               f'<line class="axis" x1="{left}" x2="{width - right}" y1="{height - bottom}" y2="{height - bottom}"/>')
    for i, (_, ps) in enumerate(series):
        dodge = (i - (len(series) - 1) / 2) * min(4.0, 24 / len(series))
        for p in ps:
            out.append(f'<circle class="dot" cx="{_num(xa(p.x) + dodge)}" cy="{_num(ya(p.y))}" r="3.5" '
                       f'fill="{colors[i]}" fill-opacity="0.8"><title>{escape(p.label)}</title></circle>')
    out.append(f'<text class="note" x="{(left + width - right) / 2}" y="{height - 6}" text-anchor="middle">'
               f'{escape(x_label)}</text></svg>')
    return Markup("".join(out))


def line_chart(series: Sequence[tuple[str, Sequence[tuple[float, float]]]], x_label: str = "", y_label: str = "",
               width: int = 640, height: int = 260) -> Markup:
    """Lines on linear axes (values may be negative: normalised rewards, losses), one colour per
    series with a legend; each point carries its value as a tooltip. Needs one point at least."""
    points = [p for _, pts in series for p in pts]
    if not points:
        raise ValueError("line_chart needs at least one point")
    left, right, top, bottom = 52, 14, 12 + 18 * math.ceil(len(series) / 4), 40
    xa = _Axis(min(x for x, _ in points), max(x for x, _ in points), left, width - right, log=False)
    ya = _Axis(min(y for _, y in points), max(y for _, y in points), height - bottom, top, log=False)
    out = [f'<svg class="chart lines" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img">']
    for v in ya.ticks():
        ty = _num(ya(v))
        out.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{ty}" y2="{ty}"/>'
                   f'<text class="tick" x="{left - 6}" y="{ty}" dy="4" text-anchor="end">{v:g}</text>')
    for v in xa.ticks():
        out.append(f'<text class="tick" x="{_num(xa(v))}" y="{height - bottom + 16}" text-anchor="middle">{v:g}</text>')
    out.append(f'<line class="axis" x1="{left}" x2="{width - right}" y1="{height - bottom}" y2="{height - bottom}"/>'
               f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{height - bottom}"/>')
    if x_label:
        out.append(f'<text class="label" x="{(left + width - right) / 2}" y="{height - 6}" text-anchor="middle">'
                   f'{escape(x_label)}</text>')
    if y_label:
        out.append(f'<text class="label" x="12" y="{top + (height - bottom - top) / 2}" text-anchor="middle" '
                   f'transform="rotate(-90 12 {top + (height - bottom - top) / 2})">{escape(y_label)}</text>')
    for i, (name, pts) in enumerate(series):
        color = SERIES_COLORS[i] if i < len(SERIES_COLORS) else OTHER_COLOR
        x, y = left + (i % 4) * (width - left - right) / 4, 4 + 18 * (i // 4)
        out.append(f'<rect class="swatch" x="{_num(x)}" y="{y}" width="12" height="12" fill="{color}"/>'
                   f'<text x="{_num(x + 16)}" y="{y + 10}">{escape(name)}</text>')
        coords = " ".join(f"{_num(xa(px))},{_num(ya(py))}" for px, py in sorted(pts))
        out.append(f'<polyline class="line" fill="none" stroke="{color}" stroke-width="1.5" points="{coords}"/>')
        for px, py in pts:
            out.append(f'<circle cx="{_num(xa(px))}" cy="{_num(ya(py))}" r="2.5" fill="{color}">'
                       f'<title>{escape(name)}: {py:.4g} at {px:g}</title></circle>')
    out.append("</svg>")
    return Markup("".join(out))
