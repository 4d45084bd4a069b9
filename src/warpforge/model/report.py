"""How a profile reads: the terminal table (rich) and profile.html (the report's style sheet, a
table and an inline SVG bar chart of each seam's share of the forward per regime). Both read the
dict that profile.json holds, so a profile can be shown again from its file.
"""

from __future__ import annotations

import html
from typing import Any

import jinja2

# one colour per regime, in order (the report's palette: accent blue, then muted tones)
COLORS = ("#0b62a4", "#e08a1e", "#00805c", "#8e44ad", "#b8420a", "#5f6675")
TOP = 20

_PAGE = """{% extends "model_base.html" %}
{% block body %}
<header class="top"><div class="crumbs">warpforge model profile</div><h1>{{ p.model }}</h1>
<p class="meta">{{ p.spec }} · {{ p.device }} ({{ p.hardware.get("gpu") or p.hardware.get("cpu") or "?" }}) · {{ p.dtype }} ·
torch {{ p.hardware.get("torch") or "?" }} · {{ p.iters }} timed forwards per regime · ranked by {{ p.ranking }}</p></header>
<table><thead><tr><th>regime</th><th>sizes</th><th class="num">forward</th><th class="num">in seams</th></tr></thead><tbody>
{% for r in p.regimes %}<tr><td>{{ r.name }}</td><td>{{ r.axes | dictsort | map("join", "=") | join(", ") or "the file's own" }}</td>
<td class="num">{{ "%.3f" | format(r.forward_ms) }} ms</td><td class="num">{{ "%.1f" | format(100 * r.covered) }} %</td></tr>{% endfor %}
</tbody></table>
{% for w in p.warnings %}<p class="empty">{{ w }}</p>{% endfor %}
<p class="meta">torch.export(strict=False): {{ "exports" if p.export.ok else "does not export: " ~ (p.export.error or "") }}</p>
<h2>Share of the forward by seam</h2>
{{ chart | safe }}
<p class="legend">{% for r in p.regimes %}<span class="swatch" style="background: {{ colors[loop.index0 % colors | length] }}"></span>{{ r.name }}{% endfor %}</p>
<h2>Seams, best first</h2>
<table><thead><tr><th>#</th><th>seam</th><th>route</th><th class="num">instances</th>
{% for r in p.regimes %}<th class="num">{{ r.name }}</th>{% endfor %}<th class="num">headroom</th><th class="num">score</th><th>Amdahl bound</th></tr></thead><tbody>
{% for s in p.seams %}<tr><td class="num">{{ loop.index }}</td><td><strong>{{ s.id }}</strong><br><span class="muted">{{ s["class"] }}</span></td>
<td>{{ "GEMM dispatcher" if s.route == "gemm" else "LLM task" }}{% if s.inside %} <span class="muted">(inside {{ s.inside }})</span>{% endif %}</td>
<td class="num">{{ s.paths | length }}</td>
{% for r in p.regimes %}<td class="num">{{ "%.1f" | format(100 * s.regimes[r.name].share) }} %</td>{% endfor %}
<td class="num">{{ headroom(s) }}</td><td class="num">{{ "%.3f" | format(s.score) }}</td>
<td>at most {{ "%.1f" | format(100 * s.bound) }} % of the forward</td></tr>{% endfor %}
</tbody></table>
<p class="meta">Share: the seam's time (every instance) over the forward's, from torch.profiler ranges around each module
call. Headroom: 1 - roofline floor / measured time ({{ "peaks of " ~ (p.hardware.get("gpu") or "") if p.peaks else "no peak known for this device: taken as 1" }}).
A GEMM inside another seam is counted in both.</p>
{% endblock %}"""

_BASE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'">
<title>{{ p.model }} · warpforge model profile</title><style>{% include "style.css" %}</style></head>
<body><main>{% block body %}{% endblock %}<footer>warpforge model profile · read-only; numbers are profile.json's.</footer></main></body></html>"""


def html_page(p: dict[str, Any]) -> str:
    """profile.html for a profile.json dict: self-contained (inline CSS and SVG), every value escaped."""
    loader = jinja2.ChoiceLoader([jinja2.DictLoader({"model_profile.html": _PAGE, "model_base.html": _BASE}),
                                  jinja2.PackageLoader("warpforge.report", "templates")])
    env = jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined)
    return env.get_template("model_profile.html").render(p=p, chart=bar_chart(p), colors=COLORS, headroom=_headroom)


def bar_chart(p: dict[str, Any]) -> str:
    """Horizontal bars: for each of the top seams, one bar per regime, as long as its share."""
    seams, regimes = p["seams"][:TOP], [r["name"] for r in p["regimes"]]
    label_w, bar_w, bar_h, gap = 220, 520, 12, 10
    row_h = bar_h * len(regimes) + gap
    height = row_h * len(seams) + 24
    top = max((s["regimes"][r]["share"] for s in seams for r in regimes), default=0.0) or 1.0
    parts = [f'<svg class="chart" viewBox="0 0 {label_w + bar_w + 80} {height}" role="img" '
             f'aria-label="share of the forward by seam">']
    for i, s in enumerate(seams):
        y = 4 + i * row_h
        parts.append(f'<text x="{label_w - 8}" y="{y + row_h / 2}" text-anchor="end" dominant-baseline="middle">'
                     f'{html.escape(s["id"])}</text>')
        for j, r in enumerate(regimes):
            share = s["regimes"][r]["share"]
            width = bar_w * share / top
            yy = y + j * bar_h
            parts.append(f'<rect x="{label_w}" y="{yy}" width="{width:.1f}" height="{bar_h - 2}" '
                         f'fill="{COLORS[j % len(COLORS)]}"><title>{html.escape(s["id"])} at {html.escape(r)}: '
                         f'{100 * share:.1f} %</title></rect>')
            parts.append(f'<text class="tick" x="{label_w + width + 4:.1f}" y="{yy + bar_h / 2}" '
                         f'dominant-baseline="middle">{100 * share:.1f} %</text>')
    axis_y = 4 + len(seams) * row_h
    parts.append(f'<line class="axis" x1="{label_w}" y1="0" x2="{label_w}" y2="{axis_y}"/>')
    parts.append(f'<text class="note" x="{label_w}" y="{axis_y + 14}">share of the forward (longest bar '
                 f'{100 * top:.1f} %)</text></svg>')
    return "".join(parts)


def print_table(p: dict[str, Any], top: int | None = None) -> None:
    """The ranking on stderr, with each seam's Amdahl bound."""
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True)
    regimes = [r["name"] for r in p["regimes"]]
    table = Table(title=f"{p['model']} on {p['device']}, ranked by {p['ranking']}", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("seam", overflow="fold")
    table.add_column("route", overflow="fold")
    table.add_column("n", justify="right")
    for r in regimes:
        table.add_column(r, justify="right", overflow="fold")
    if p.get("peaks"):
        table.add_column("headroom", justify="right")
    table.add_column("score", justify="right")
    table.add_column("bound", justify="right")
    for i, s in enumerate(p["seams"][:top] if top else p["seams"], 1):
        route = "LLM" if s["route"] == "llm" else f"GEMM in {s['inside']}" if s.get("inside") else "GEMM"
        table.add_row(str(i), s["id"], route, str(len(s["paths"])),
                      *[f"{100 * s['regimes'][r]['share']:.1f} %" for r in regimes],
                      *([_headroom(s)] if p.get("peaks") else []), f"{s['score']:.3f}", f"<= {100 * s['bound']:.1f} %")
    console.print(table)
    console.print("share: of the forward's time, per regime; bound (Amdahl): making the seam free saves at most "
                  "this much of the forward; LLM seams become tasks, GEMM seams go to the GEMM dispatcher")
    for r in p["regimes"]:
        console.print(f"{r['name']}: forward {r['forward_ms']:.3f} ms, {100 * r['covered']:.1f} % of it inside seams")
    for w in p.get("warnings") or ():
        console.print(f"warning: {w}")


def _headroom(s: dict[str, Any]) -> str:
    values = [r["headroom"] for r in s["regimes"].values() if r.get("headroom") is not None]
    return f"{100 * min(values):.0f}-{100 * max(values):.0f} %" if values else "-"
