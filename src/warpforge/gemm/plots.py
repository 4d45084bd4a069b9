"""`warpforge gemm plot RESULTS... --out DIR`: charts and tables of per-shape HGEMM benchmark results.

Reads the JSON files the GEMM benchmark writes (one per GPU, shape set and mode), sums each up
(geometric-mean speedups over torch.matmul, cuBLASLt autotuned and torch.compile; worst shapes;
breakdowns by FLOP bucket and by the dispatcher's choice) and writes a static page with inline SVG
(heat maps per K for a grid of shapes, dots against M otherwise) and a summary.md for the README.
It re-times nothing: speedups are the benchmark's own, and a null one means 'not measured'.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import jinja2
from markupsafe import Markup

from warpforge import jsonl
from warpforge.errors import UsageError
from warpforge.metrics import geometric_mean
from warpforge.report import plots
from warpforge.report.pages import positive

Shape = dict[str, Any]
"""One entry of a results file's "shapes" list, as the benchmark wrote it."""

# (summary key, field of a shape, what the page calls the baseline); the speedups are baseline / warpforge
BASELINES = (("vs_torch", "speedup_vs_torch", "torch.matmul"),
             ("vs_cublaslt", "speedup_vs_cublaslt_autotuned", "cuBLASLt autotuned"),
             ("vs_compile", "speedup_vs_compile", "torch.compile"))

# Below this speedup over torch.matmul a dispatched shape counts as a loss; the 1% between it and
# 1x is treated as run-to-run timing noise, not as a regression.
LOSS_BELOW = 0.99

# (label, upper bound in FLOPs, exclusive): from launch-latency-sized GEMMs (decode) to large
# compute-bound ones, where different kernels tend to win.
FLOP_BUCKETS = (("<1e9", 1e9), ("1e9–1e11", 1e11), ("1e11–1e12", 1e12), ("≥1e12", math.inf))

WORST_ROWS = 15


class Geomean(TypedDict):
    value: float | None
    """None when no shape has a speedup over this baseline."""
    n: int


class Worst(TypedDict):
    speedup: float
    shape: str
    source: str
    choice: str


class Group(TypedDict):
    name: str
    n: int
    vs_torch: Geomean
    vs_cublaslt: Geomean
    vs_compile: Geomean
    losses: int
    """Shapes below LOSS_BELOW over torch.matmul."""


class Summary(TypedDict):
    n: int
    vs_torch: Geomean
    vs_cublaslt: Geomean
    vs_compile: Geomean
    worst: Worst | None
    """The lowest speedup over torch.matmul after dispatch."""
    losses: int
    not_torch: float | None
    """Share of the shapes with a choice where the dispatcher picked something other than torch."""
    by_flops: list[Group]
    by_choice: list[Group]


def _speedup(base: object, ours: object) -> float | None:
    b, o = _number(base), _number(ours)
    return b / o if b and o else None


def records_as_results(path: Path) -> dict[str, Any]:
    """Tuning records (`gemm tune`'s tune*.jsonl, or .jsonl.gz) read as one results file, so that
    the whole grid the tuner measured can be drawn: per shape its choice against torch.matmul and
    autotuned cuBLASLt, by the tuner's own final timing, which the choice was picked on (biased up;
    `gemm bench` re-times on fresh operands)."""
    try:
        records = [r for r in jsonl.read(path) if isinstance(r, dict) and "choice" in r]
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    if not records:
        raise UsageError(f"{path} holds no tuning records with a choice: pass the tune*.jsonl that `gemm tune` wrote")
    shapes = []
    for r in records:
        base = r.get("baselines") or {}
        torch_ms = (base.get("torch") or {}).get("ms")
        lt_ms = (base.get("cublaslt_autotuned") or {}).get("ms")
        shapes.append({"M": r["M"], "N": r["N"], "K": r["K"], "dtype": r.get("dtype"), "layout": r.get("layout"),
                       "source": r.get("source"), "flops": 2 * r["M"] * r["N"] * r["K"], "choice": r["choice"],
                       "choice_how": "measured", "torch_ms": torch_ms, "cublaslt_autotuned_ms": lt_ms,
                       "warpforge_ms": r.get("choice_ms"), "speedup_vs_torch": _speedup(torch_ms, r.get("choice_ms")),
                       "speedup_vs_cublaslt_autotuned": _speedup(lt_ms, r.get("choice_ms"))})
    gpus = sorted({str(r.get("gpu")) for r in records})
    sources = sorted({str(r.get("source") or "") for r in records} - {""})
    layouts = sorted({str(r.get("layout")) for r in records})
    name = sources[0] if len(sources) == 1 else path.name.split(".")[0]  # llm: one source per projection
    return {"gpu": ", ".join(gpus), "set": name, "mode": "tune",
            "layout": ", ".join(layouts), "date": max(str(r.get("tuned_at", ""))[:10] for r in records),
            "versions": {"torch": ", ".join(sorted({str(r.get("torch")) for r in records}))},
            "method": {"timing": "the tuner's own final timing (gemm tune), which the choice was picked on: "
                                 "biased up; gemm bench re-times on fresh operands",
                       "records": str(path)},
            "shapes": shapes, "path": str(path)}


def load_results(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Each results file, parsed; a folder stands for its gemm_*.json files; tuning records
    (*.jsonl, *.jsonl.gz) are read by `records_as_results`. Adds "path" (the file)."""
    files: list[Path] = []
    for path in map(Path, paths):
        files += sorted(path.glob("gemm_*.json")) if path.is_dir() else [path]
    if not files:
        raise UsageError("no GEMM results files given: pass gemm_*.json files written by the GEMM benchmark, "
                         "or a folder holding them")
    results = []
    for f in files:
        if not f.is_file():
            raise UsageError(f"no results file {f}: check the path (the benchmark writes "
                             "benchmarks/results/gemm_*.json)")
        if f.name.endswith((".jsonl", ".jsonl.gz")):
            results.append(records_as_results(f))
            continue
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {f}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise UsageError(f"{f} is not valid JSON (line {exc.lineno}): pass a results file that the GEMM "
                             "benchmark wrote") from None
        if not isinstance(data, dict) or not isinstance(data.get("shapes"), list):
            raise UsageError(f'{f} has no "shapes" list: is it a GEMM benchmark results file?')
        for i, s in enumerate(data["shapes"], 1):
            if not (isinstance(s, dict) and all(type(s.get(d)) is int and s[d] > 0 for d in "MNK")):
                raise UsageError(f"shape {i} in {f} needs positive integer M, N and K, got {s!r}")
        data.setdefault("path", str(f))
        results.append(data)
    return results


def choice_family(choice: object) -> str:
    """The kind of kernel a dispatch choice names: the text before ':' ("cublaslt:3" -> cublaslt,
    "triton_splitk:BM16-..." -> triton_splitk), else its '_'-separated words up to the first with a
    digit ("mma_128x128x32_w2x2_s3" -> mma; "torch" and "torch_padded" stay whole)."""
    if not isinstance(choice, str) or not choice:
        return "none"
    if ":" in choice:
        return choice.split(":", 1)[0]
    words = itertools.takewhile(lambda w: not any(c.isdigit() for c in w), choice.split("_"))
    return "_".join(words) or choice


def shape_label(s: Shape) -> str:
    return f"{s['M']}×{s['N']}×{s['K']}"


def _flops(s: Shape) -> float:
    return positive(s.get("flops")) or 2.0 * s["M"] * s["N"] * s["K"]


def _geomean(shapes: Sequence[Shape], field: str) -> Geomean:
    values = [v for v in (positive(s.get(field)) for s in shapes) if v is not None]
    return {"value": geometric_mean(values) if values else None, "n": len(values)}


def _losses(shapes: Iterable[Shape]) -> int:
    return sum(1 for s in shapes if (v := positive(s.get("speedup_vs_torch"))) is not None and v < LOSS_BELOW)


def _group(name: str, shapes: Sequence[Shape]) -> Group:
    return {"name": name, "n": len(shapes), "vs_torch": _geomean(shapes, "speedup_vs_torch"),
            "vs_cublaslt": _geomean(shapes, "speedup_vs_cublaslt_autotuned"),
            "vs_compile": _geomean(shapes, "speedup_vs_compile"), "losses": _losses(shapes)}


def _groups(shapes: Iterable[Shape], key: Callable[[Shape], str], order: Sequence[str] = ()) -> list[Group]:
    """Shapes grouped by key(shape): groups named in `order` first (when not empty), then the rest by size."""
    by: dict[str, list[Shape]] = defaultdict(list)
    for s in shapes:
        by[key(s)].append(s)
    names = [n for n in order if n in by] + sorted((n for n in by if n not in order), key=lambda n: (-len(by[n]), n))
    return [_group(n, by[n]) for n in names]


def flop_bucket(s: Shape) -> str:
    return next(label for label, upper in FLOP_BUCKETS if _flops(s) < upper)


def summary(results: dict[str, Any]) -> Summary:
    """The numbers of one results file (see Summary); a geomean is over the shapes with that speedup."""
    shapes: list[Shape] = results["shapes"]
    timed = [(v, s) for s in shapes if (v := positive(s.get("speedup_vs_torch"))) is not None]
    low = min(timed, key=lambda t: t[0], default=None)
    chosen = [s for s in shapes if isinstance(s.get("choice"), str) and s["choice"]]
    overall = _group("all", shapes)
    return {"n": len(shapes), "vs_torch": overall["vs_torch"], "vs_cublaslt": overall["vs_cublaslt"],
            "vs_compile": overall["vs_compile"], "losses": overall["losses"],
            "worst": {"speedup": low[0], "shape": shape_label(low[1]), "source": str(low[1].get("source") or ""),
                      "choice": str(low[1].get("choice") or "—")} if low else None,
            "not_torch": sum(s["choice"] != "torch" for s in chosen) / len(chosen) if chosen else None,
            "by_flops": _groups(shapes, flop_bucket, [label for label, _ in FLOP_BUCKETS]),
            "by_choice": _groups(shapes, lambda s: choice_family(s.get("choice")))}


def is_grid(shapes: Sequence[Shape]) -> bool:
    """Whether the shapes fill enough of a grid for heat maps per K to read well: two or more values
    of M and of N, and each plane (M, N), (M, K), (N, K) at least half covered. The llm set fails on
    (N, K), where each projection has its own pair (about 18% of the plane); a grid sweep cut short
    in any order passes."""
    dims = {d: {s[d] for s in shapes} for d in "MNK"}
    if len(dims["M"]) < 2 or len(dims["N"]) < 2:
        return False
    return all(len({(s[a], s[b]) for s in shapes}) >= 0.5 * len(dims[a]) * len(dims[b])
               for a, b in (("M", "N"), ("M", "K"), ("N", "K")))


def _dim(v: int) -> str:
    return f"{v // 1024}k" if v >= 1024 and v % 1024 == 0 else str(v)


def _tip(s: Shape, v: float, baseline: str) -> str:
    ms = positive(s.get("warpforge_ms"))
    return (f"{s.get('source') or ''} M={s['M']} N={s['N']} K={s['K']}: {v:.3f}× over {baseline} · "
            f"{s.get('choice') or '—'}" + (f" · {ms:.4g} ms" if ms else "")).strip()


def heat_maps(shapes: Sequence[Shape], field: str, baseline: str, scale: plots.RatioScale) -> list[Markup]:
    """One heat map of `field` over M (rows) and N (columns) per K (and per dtype and layout when a
    file mixes them), on one colour scale and one set of rows and columns so that they line up."""
    ms, ns = sorted({s["M"] for s in shapes}), sorted({s["N"] for s in shapes})
    kinds = {(str(s.get("dtype", "")), str(s.get("layout", ""))) for s in shapes}
    panels: dict[tuple[str, str, int], dict[tuple[int, int], tuple[float, str]]] = defaultdict(dict)
    for s in shapes:
        cells = panels[(str(s.get("dtype", "")), str(s.get("layout", "")), s["K"])]
        if (v := positive(s.get(field))) is not None:
            cells[(ms.index(s["M"]), ns.index(s["N"]))] = (v, _tip(s, v, baseline))
    cell_px = 28 if len(ns) <= 12 else 18
    return [plots.heat_map([_dim(m) for m in ms], [_dim(n) for n in ns], cells, scale, corner="M \\ N",
                           title=f"K = {k}" + (f" · {dtype} {layout}" if len(kinds) > 1 else ""), cell_px=cell_px)
            for (dtype, layout, k), cells in sorted(panels.items(), key=lambda kv: (kv[0][2], kv[0][:2]))]


def _series_name(s: Shape) -> str:
    """What a dot is coloured by: the projection of an llm shape ("llama-3.1-8b:down_proj" -> down_proj),
    else the whole source."""
    source = str(s.get("source") or "—")
    return source.split(":", 1)[1] if ":" in source else source


def dot_plot(shapes: Sequence[Shape], field: str, baseline: str) -> Markup | None:
    """Speedup over `baseline` against M, one colour per projection / source; past the palette's
    length the smallest series merge into 'other'. None when no shape has this speedup."""
    by: dict[str, list[plots.Point]] = defaultdict(list)
    for s in shapes:
        if (v := positive(s.get(field))) is not None:
            by[_series_name(s)].append(plots.Point(s["M"], v, _tip(s, v, baseline)))
    if not by:
        return None
    names = sorted(by, key=lambda n: (-len(by[n]), n))
    keep = len(plots.SERIES_COLORS) - 1 if len(names) > len(plots.SERIES_COLORS) else len(names)
    series = [(n, by[n]) for n in sorted(names[:keep])]
    if names[keep:]:
        series.append(("other", [p for n in names[keep:] for p in by[n]]))
    return plots.dot_plot(series, x_label="M (tokens / rows of A), log scale", width=900, height=340)


def _worst(shapes: Sequence[Shape], field: str) -> list[Shape]:
    timed = [s for s in shapes if positive(s.get(field)) is not None]
    return sorted(timed, key=lambda s: s[field])[:WORST_ROWS]


def _sweep(results: dict[str, Any]) -> dict[str, Any]:
    return results["sweep"] if isinstance(results.get("sweep"), dict) else {}


def _measured(results: dict[str, Any]) -> str:
    """"212 / 1,000": the shapes in the file over the shapes the sweep planned (when it says)."""
    planned = _sweep(results).get("planned")
    return f"{len(results['shapes']):,}" + (f" / {planned:,}" if isinstance(planned, int) else "")


def _sweep_line(results: dict[str, Any]) -> str:
    planned, note = _sweep(results).get("planned"), _sweep(results).get("note")
    share = ""
    if isinstance(planned, int) and planned:
        share = f" ({100 * len(results['shapes']) / planned:.0f}% of the planned)"
    return f"Sweep: {_measured(results)} shapes measured{share}." + (f" {note}" if note else "")


def _section(i: int, results: dict[str, Any]) -> dict[str, Any]:
    """What the page shows of one results file."""
    shapes: list[Shape] = results["shapes"]
    grid = is_grid(shapes)
    charts: list[tuple[str, Markup | None, list[Markup]]] = []
    present = [(key, field, name) for key, field, name in BASELINES if any(positive(s.get(field)) for s in shapes)]
    values = {field: [v for s in shapes if (v := positive(s.get(field))) is not None] for _, field, _ in present}
    for _, field, name in present:
        scale = plots.RatioScale.fit(values[field])
        if grid:
            charts.append((name, plots.ratio_legend(scale), heat_maps(shapes, field, name, scale)))
        else:
            dots = dot_plot(shapes, field, name)
            charts.append((name, None, [dots] if dots else []))
    everything = [v for vs in values.values() for v in vs]
    lo, hi = min(everything, default=1.0), max(everything, default=1.0)  # one x range, so the histograms compare
    histograms = [plots.ratio_histogram(values[field], lo, hi, title=f"over {name}") for _, field, name in present]
    versions = results.get("versions")
    return {"anchor": f"r{i}", "results": results, "summary": summary(results), "grid": grid,
            "title": _title(results),
            "versions": " · ".join(f"{k} {v}" for k, v in versions.items()) if isinstance(versions, dict) else "",
            "method": json.dumps(results["method"], indent=2) if results.get("method") else "",
            "sweep": _sweep_line(results), "charts": charts, "histograms": histograms,
            "by_source": _groups(shapes, _series_name) if not grid else [],
            "worst_torch": _worst(shapes, "speedup_vs_torch"),
            "worst_cublaslt": _worst(shapes, "speedup_vs_cublaslt_autotuned")}


def mode_label(results: dict[str, Any]) -> str:
    """"offline", or "offline, online tuning" for a bench run with unmeasured shapes tuned on first use
    (the `online` field; files written before it have only the method's words)."""
    mode = str(results.get("mode") or "?")
    method = results.get("method")
    how = str(method.get("unmeasured_shapes", "")) if isinstance(method, dict) else ""
    return f"{mode}, online tuning" if results.get("online") or "WARPFORGE_GEMM_ONLINE" in how else mode


def _title(results: dict[str, Any]) -> str:
    return " · ".join(mode_label(results) if k == "mode" else str(results.get(k) or "?")
                      for k in ("gpu", "set", "mode", "date"))


def _number(v: object) -> float | None:
    return positive(v) if isinstance(v, int | float) else None


def _x(v: object) -> str:
    x = _number(v)
    return "—" if x is None else f"{x:#.3g}×" if x < 100 else f"{x:,.0f}×"  # 1.00×, not 1×


def _gm(g: Geomean) -> str:
    return "—" if g["value"] is None else f"{_x(g['value'])} ({g['n']:,})"


def _ms(v: object) -> str:
    x = _number(v)
    return "—" if x is None else f"{x:.4g}"


def _worst_text(w: Worst | None, set_name: object = None) -> str:
    """"0.930× at 64×128×4096 (cublaslt:3)", with the shape's source when it is not the set's name."""
    if w is None:
        return "—"
    source = f" {w['source']}" if w["source"] and w["source"] != set_name else ""
    return f"{_x(w['speedup'])} at {w['shape']}{source} ({w['choice']})"


MARKDOWN_HEAD = ("| set | mode | shapes measured / planned | vs torch.matmul | vs cuBLASLt autotuned "
                 f"| vs torch.compile | worst shape after dispatch | shapes < {LOSS_BELOW}× |\n"
                 "|---|---|--:|--:|--:|--:|---|--:|\n")


def _markdown_row(results: dict[str, Any]) -> str:
    s = summary(results)
    cells = [str(results.get("set") or "?"), mode_label(results), _measured(results),
             _gm(s["vs_torch"]), _gm(s["vs_cublaslt"]), _gm(s["vs_compile"]),
             _worst_text(s["worst"], results.get("set")), f"{s['losses']:,}"]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n"


def summary_markdown(all_results: Sequence[dict[str, Any]]) -> str:
    """A markdown table per results file, for the README; speedups are geomeans with (shapes) beside."""
    out = ["# HGEMM per-shape results\n\nGeometric-mean speedup of the kernel warpforge dispatches per shape over "
           "each baseline, with the number of shapes where both were measured.\n"]
    for results in all_results:
        versions = results.get("versions")
        out.append(f"\n## {_title(results)}\n\n")
        if isinstance(versions, dict) and versions:
            out.append(" · ".join(f"{k} {v}" for k, v in versions.items()) + "\n\n")
        out.append(MARKDOWN_HEAD + _markdown_row(results))
    return "".join(out)


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'">
<title>HGEMM per-shape results · warpforge</title>
<style>
{% include "style.css" %}
section.results { border-top: 2px solid var(--line); margin-top: 36px; }
.panels { display: flex; flex-wrap: wrap; gap: 12px 24px; align-items: flex-start; margin: 6px 0 12px; }
svg.chart .title { font-weight: 600; }
.loss { color: var(--bad); font-weight: 600; }
</style>
</head>
<body>
<main>
<header class="top">
<div class="crumbs">warpforge gemm plot</div>
<h1>HGEMM per-shape results</h1>
<div class="meta">{{ sections | length }} results file{{ "s" if sections | length != 1 }} · speedup = the baseline's time
over the time of the kernel that warpforge's dispatcher picked for the shape (above 1× is faster) ·
numbers in brackets are the shapes where both were measured</div>
</header>
{% macro gm(g) %}{{ g.value | x }} <span class="muted">({{ g.n | count }})</span>{% endmacro %}
{% macro groups(rows, head) %}
<table class="groups">
<thead><tr><th>{{ head }}</th><th class="num">shapes</th><th class="num">vs torch.matmul</th>
<th class="num">vs cuBLASLt autotuned</th><th class="num">vs torch.compile</th><th class="num">below {{ loss_below }}× vs torch</th></tr></thead>
<tbody>
{% for g in rows %}
<tr><td>{{ g.name }}</td><td class="num">{{ g.n | count }}</td><td class="num">{{ gm(g.vs_torch) }}</td>
<td class="num">{{ gm(g.vs_cublaslt) }}</td><td class="num">{{ gm(g.vs_compile) }}</td>
<td class="num{{ ' loss' if g.losses }}">{{ g.losses | count }}</td></tr>
{% endfor %}
</tbody>
</table>
{% endmacro %}
{% macro worst(rows, field, name) %}
{% if rows %}
<table class="worst" data-field="{{ field }}">
<thead><tr><th>M×N×K</th><th>source</th><th>choice</th><th class="num">torch.matmul ms</th><th class="num">cuBLASLt autotuned ms</th>
<th class="num">warpforge ms</th><th class="num">vs torch.matmul</th><th class="num">vs cuBLASLt autotuned</th><th class="num">rel. error</th></tr></thead>
<tbody>
{% for s in rows %}
<tr><td class="nowrap">{{ s | shape }}</td><td>{{ s.get("source") or "—" }}</td><td>{{ s.get("choice") or "—" }}</td>
<td class="num">{{ s.get("torch_ms") | ms }}</td><td class="num">{{ s.get("cublaslt_autotuned_ms") | ms }}</td>
<td class="num">{{ s.get("warpforge_ms") | ms }}</td>
{% for f in ("speedup_vs_torch", "speedup_vs_cublaslt_autotuned") %}
<td class="num{{ ' loss' if s.get(f) | is_loss }}">{{ s.get(f) | x }}</td>
{% endfor %}
<td class="num">{{ "%.2g" | format(s.rel_err) if s.get("rel_err") is number else "—" }}</td></tr>
{% endfor %}
</tbody>
</table>
{% else %}
<p class="empty">No shape has a speedup over {{ name }}.</p>
{% endif %}
{% endmacro %}

<table id="files">
<thead><tr><th>GPU · set · mode · date</th><th class="num">shapes measured / planned</th><th class="num">vs torch.matmul</th>
<th class="num">vs cuBLASLt autotuned</th><th class="num">vs torch.compile</th><th class="num">&lt; {{ loss_below }}×</th></tr></thead>
<tbody>
{% for s in sections %}
<tr><td><a href="#{{ s.anchor }}">{{ s.title }}</a></td><td class="num">{{ s.results | measured }}</td>
<td class="num">{{ gm(s.summary.vs_torch) }}</td><td class="num">{{ gm(s.summary.vs_cublaslt) }}</td>
<td class="num">{{ gm(s.summary.vs_compile) }}</td><td class="num">{{ s.summary.losses | count }}</td></tr>
{% endfor %}
</tbody>
</table>

{% for s in sections %}
{% set sm = s.summary %}
<section class="results" id="{{ s.anchor }}">
<h2>{{ s.title }}</h2>
<p class="meta">{{ s.results.path }}
{%- if s.results.get("layout") %} · layout {{ s.results.layout }}{% endif %}
{%- if s.versions %} · {{ s.versions }}{% endif %}</p>
<p class="meta sweep">{{ s.sweep }}</p>
{% if not sm.n %}
<p class="empty">This file holds no shapes yet.</p>
{% else %}
<p class="headline">Geometric-mean speedup after dispatch over torch.matmul: <strong>{{ sm.vs_torch.value | x }}</strong>
({{ sm.vs_torch.n | count }} shapes) · over cuBLASLt autotuned: <strong>{{ sm.vs_cublaslt.value | x }}</strong>
({{ sm.vs_cublaslt.n | count }}) · over torch.compile: <strong>{{ sm.vs_compile.value | x }}</strong> ({{ sm.vs_compile.n | count }}).</p>
<p class="meta">Worst shape after dispatch: {{ sm.worst | worst_text(s.results.get("set")) }} ·
<span class="{{ 'loss' if sm.losses }}">{{ sm.losses | count }} shapes below {{ loss_below }}×</span> over torch.matmul ·
{% if sm.not_torch is not none %}
dispatched to something other than torch.matmul on {{ "%.0f" | format(100 * sm.not_torch) }}% of the shapes.
{% else %}
no dispatch choices recorded.
{% endif %}
</p>

{% for name, legend, charts in s.charts %}
{% if s.grid %}
<details class="heat"{{ " open" if loop.first }}><summary>Speedup over {{ name }} by shape: M rows × N columns,
one panel per K (hover a cell for its numbers; hatched: not measured)</summary>
{{ legend }}
<div class="panels">{% for c in charts %}{{ c }}{% endfor %}</div>
</details>
{% else %}
<details class="dots"{{ " open" if loop.first }}><summary>Speedup over {{ name }} against M,
coloured by projection / source (hover a dot for its shape)</summary>
{% for c in charts %}{{ c }}{% endfor %}
</details>
{% endif %}
{% endfor %}

{% if s.histograms %}
<h3>Distribution of the speedups (log scale; one bar per equal ratio step)</h3>
<div class="panels">{% for h in s.histograms %}{{ h }}{% endfor %}</div>
{% endif %}

<h3>By FLOP bucket</h3>
{{ groups(sm.by_flops, "FLOPs (2·M·N·K)") }}
<h3>By the dispatcher's choice</h3>
{{ groups(sm.by_choice, "kernel family") }}
{% if s.by_source %}
<h3>By projection / source</h3>
{{ groups(s.by_source, "projection / source") }}
{% endif %}

<h3>Worst {{ worst_rows }} shapes over torch.matmul</h3>
{{ worst(s.worst_torch, "speedup_vs_torch", "torch.matmul") }}
<h3>Worst {{ worst_rows }} shapes over cuBLASLt autotuned</h3>
{{ worst(s.worst_cublaslt, "speedup_vs_cublaslt_autotuned", "cuBLASLt autotuned") }}
{% endif %}
{% if s.method %}<details><summary>method</summary><pre>{{ s.method }}</pre></details>{% endif %}
</section>
{% endfor %}
<footer>warpforge gemm plot · generated {{ generated }} · numbers as the benchmark wrote them; nothing was re-timed.</footer>
</main>
</body>
</html>
"""


def _environment() -> jinja2.Environment:
    # the report's style.css comes from its package, so the two kinds of page look alike
    loader = jinja2.ChoiceLoader([jinja2.DictLoader({"gemm.html": PAGE}),
                                  jinja2.PackageLoader("warpforge.report", "templates")])
    env = jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(x=_x, ms=_ms, shape=shape_label, measured=_measured, worst_text=_worst_text,
                       count=lambda v: f"{v:,}", is_loss=lambda v: (_number(v) or 1.0) < LOSS_BELOW)
    return env


def render(paths: Sequence[str | Path], out_dir: str | Path) -> Path:
    """Write index.html (a section per results file) and summary.md under out_dir; return index.html's path."""
    all_results = load_results(paths)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the plot folder {out} ({exc.strerror}): pick a writable --out") from None
    page = _environment().get_template("gemm.html").render(
        sections=[_section(i, r) for i, r in enumerate(all_results)], loss_below=LOSS_BELOW, worst_rows=WORST_ROWS,
        generated=datetime.fromtimestamp(time.time(), UTC).strftime("%Y-%m-%d %H:%M UTC"))
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    (out / "summary.md").write_text(summary_markdown(all_results), encoding="utf-8")
    return index

