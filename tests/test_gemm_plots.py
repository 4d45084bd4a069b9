"""`warpforge gemm plot`: summary numbers of synthetic results against geomeans worked out by hand,
grid detection, heat map cells, the page and summary.md, missing values, and bad input."""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from warpforge.errors import UsageError
from warpforge.gemm.plots import choice_family, heat_maps, is_grid, load_results, render, summary
from warpforge.gemm.shapes import shape_set
from warpforge.report import plots
from warpforge.report.plots import RatioScale

MS, NS, KS = (64, 128, 256), (256, 512, 1024), (1024, 65536)  # K=1024: all < 1e9 FLOPs; K=65536: 2e9..3.5e10


def grid_shape(m: int, n: int, k: int) -> dict[str, Any]:
    """K=1024: 1x over torch (chose torch) except 0.8x at 64x256 (a loss) and 0.995x at 128x256 (noise,
    not a loss); K=65536: 2x, by three kernel families. cuBLASLt: 1.25x, not measured at M=256 K=65536.
    torch.compile: 3x, measured for K=65536 only."""
    big = k == 65536
    speedup = 2.0 if big else {(64, 256): 0.8, (128, 256): 0.995}.get((m, n), 1.0)
    choice = ["triton_splitk:BM16-BN64-BK128-S4", "mma_128x128x32_w2x2_s3", "torch_padded"][MS.index(m)] if big \
        else "cublaslt:3" if speedup == 0.8 else "torch"
    return {"M": m, "N": n, "K": k, "dtype": "float16", "layout": "nn", "source": "grid.csv", "flops": 2 * m * n * k,
            "torch_ms": 0.02 * speedup, "cublaslt_autotuned_ms": None if big and m == 256 else 0.025,
            "compile_ms": 0.06 if big else None, "choice": choice, "warpforge_ms": 0.02,
            "speedup_vs_torch": speedup, "speedup_vs_cublaslt_autotuned": None if big and m == 256 else 1.25,
            "speedup_vs_compile": 3.0 if big else None, "rel_err": 1e-4}


GRID: dict[str, Any] = {
    "gpu": "NVIDIA H100 80GB HBM3", "set": "grid.csv", "mode": "offline", "date": "2026-11-23",
    "versions": {"torch": "2.9.0", "cuda": "13.0"}, "method": {"timing": "median of 100"},
    "sweep": {"planned": 20, "measured": 18, "note": "stopped early"},
    "shapes": [grid_shape(m, n, k) for k, m, n in itertools.product(KS, MS, NS)]}

LLM: dict[str, Any] = {
    "gpu": "NVIDIA H100 80GB HBM3", "set": "llm", "mode": "server", "date": "2026-11-24",
    "shapes": [
        {"M": 1, "N": 6144, "K": 4096, "source": "llama-3.1-8b:qkv_proj", "choice": "triton_splitk:BM16",
         "speedup_vs_torch": 1.5, "speedup_vs_cublaslt_autotuned": None, "speedup_vs_compile": None},
        {"M": 8, "N": 4096, "K": 14336, "source": "llama-3.1-8b:down_proj", "choice": "torch",
         "speedup_vs_torch": 0.9, "speedup_vs_cublaslt_autotuned": 1.1, "speedup_vs_compile": None},
        {"M": 2048, "N": 50257, "K": 768, "source": "gpt2:lm_head", "choice": None,
         "speedup_vs_torch": None, "speedup_vs_cublaslt_autotuned": None, "speedup_vs_compile": None},
        {"M": 1, "N": 50257, "K": 768, "source": "<script>alert(1)</script>:lm_head", "choice": "torch_padded",
         "speedup_vs_torch": 1.2, "speedup_vs_cublaslt_autotuned": 0.6, "speedup_vs_compile": 2.0},
    ]}


def write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_summary_of_a_grid_matches_geomeans_worked_out_by_hand() -> None:
    s = summary(GRID)
    assert s["n"] == 18
    assert s["vs_torch"]["n"] == 18
    assert s["vs_torch"]["value"] == pytest.approx((0.8 * 0.995 * 2 ** 9) ** (1 / 18))
    assert s["vs_cublaslt"] == {"value": pytest.approx(1.25), "n": 15}
    assert s["vs_compile"] == {"value": pytest.approx(3.0), "n": 9}
    assert s["worst"] == {"speedup": 0.8, "shape": "64×256×1024", "source": "grid.csv", "choice": "cublaslt:3"}
    assert s["losses"] == 1  # 0.995x is within the 1% noise band
    assert s["not_torch"] == pytest.approx(10 / 18)
    buckets = {g["name"]: g for g in s["by_flops"]}
    assert [g["name"] for g in s["by_flops"]] == ["<1e9", "1e9–1e11"]
    assert buckets["<1e9"]["n"] == 9 and buckets["<1e9"]["losses"] == 1
    assert buckets["<1e9"]["vs_torch"]["value"] == pytest.approx((0.8 * 0.995) ** (1 / 9))
    assert buckets["1e9–1e11"]["vs_torch"]["value"] == pytest.approx(2.0)
    assert buckets["1e9–1e11"]["vs_cublaslt"]["n"] == 6
    families = {g["name"]: (g["n"], g["vs_torch"]["value"]) for g in s["by_choice"]}
    assert families == {"torch": (8, pytest.approx(0.995 ** (1 / 8))), "cublaslt": (1, pytest.approx(0.8)),
                        "triton_splitk": (3, 2.0), "mma": (3, 2.0), "torch_padded": (3, 2.0)}


def test_summary_of_llm_shapes_uses_only_shapes_with_both_times() -> None:
    s = summary(LLM)
    assert s["n"] == 4
    assert s["vs_torch"] == {"value": pytest.approx((1.5 * 0.9 * 1.2) ** (1 / 3)), "n": 3}
    assert s["vs_cublaslt"] == {"value": pytest.approx(math.sqrt(1.1 * 0.6)), "n": 2}
    assert s["vs_compile"] == {"value": pytest.approx(2.0), "n": 1}
    assert s["worst"] is not None and s["worst"]["shape"] == "8×4096×14336" and s["worst"]["choice"] == "torch"
    assert s["losses"] == 1
    assert s["not_torch"] == pytest.approx(2 / 3)  # the shape without a choice is not counted
    assert sum(g["n"] for g in s["by_flops"]) == 4


def test_choice_families() -> None:
    assert [choice_family(c) for c in ("torch", "cublaslt:3", "triton_splitk:BM16-BN64-BK128-S4",
                                       "mma_128x128x32_w2x2_s3", "torch_padded", None, "")] == \
        ["torch", "cublaslt", "triton_splitk", "mma", "torch_padded", "none", "none"]


def test_grid_or_not_is_read_from_the_shapes() -> None:
    assert is_grid(GRID["shapes"])
    assert not is_grid(LLM["shapes"])
    as_dicts = [{"M": s.M, "N": s.N, "K": s.K} for s in shape_set("llm")]
    assert not is_grid(as_dicts)
    cudal2 = [{"M": s.M, "N": s.N, "K": s.K} for s in shape_set("cudal2")]
    assert is_grid(cudal2[:212])  # a sweep cut short in order
    assert is_grid(cudal2[::5])  # or a fifth of it, spread out


def test_heat_maps_have_one_cell_per_mn_pair_of_each_k() -> None:
    panels = heat_maps(GRID["shapes"], "speedup_vs_torch", "torch.matmul", RatioScale.fit([0.8, 2.0]))
    assert len(panels) == len(KS)
    for k, panel in zip(KS, panels):
        assert f"K = {k}" in panel
        assert panel.count('class="cell"') == len(MS) * len(NS) and 'class="cell missing"' not in panel
    # one shape gone and cuBLASLt not measured at M=256, K=65536: those cells are hatched, not dropped
    partial = [s for s in GRID["shapes"] if (s["M"], s["N"], s["K"]) != (64, 256, 1024)]
    panels = heat_maps(partial, "speedup_vs_cublaslt_autotuned", "cuBLASLt", RatioScale.fit([1.25]))
    assert [p.count('class="cell"') for p in panels] == [8, 6]
    assert [p.count('class="cell missing"') for p in panels] == [1, 3]
    assert "64×256×1024" not in "".join(panels)
    assert "M=128 N=512 K=65536: 1.250× over cuBLASLt" in panels[1]


def test_render_writes_the_page_and_the_markdown(tmp_path: Path) -> None:
    paths = [write(tmp_path, "gemm_h100_grid_offline_2026-11-23.json", GRID),
             write(tmp_path, "gemm_h100_llm_server_2026-11-24.json", LLM)]
    index = render(paths, tmp_path / "site")
    assert index == tmp_path / "site" / "index.html"
    page = index.read_text(encoding="utf-8")
    assert "default-src 'none'" in page and "<script" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # a source name is escaped, in tables and tooltips
    grid_gm = (0.8 * 0.995 * 2 ** 9) ** (1 / 18)
    assert f"<strong>{grid_gm:#.3g}×</strong>" in page
    assert "Sweep: 18 / 20 shapes measured (90% of the planned). stopped early" in page
    assert "NVIDIA H100 80GB HBM3 · llm · server · 2026-11-24" in page
    grid_section, llm_section = page.split('<section class="results"')[1:]
    assert grid_section.count('class="chart heat"') == 3 * len(KS)  # per K, for each of the three baselines
    assert 'class="chart dots"' not in grid_section
    assert 'class="chart heat"' not in llm_section and llm_section.count('class="chart dots"') == 3
    assert len(re.findall('class="chart hist"', grid_section)) == 3
    assert "0.800× at 64×256×1024 (cublaslt:3)" in grid_section
    assert "down_proj" in llm_section and "qkv_proj" in llm_section  # the table by projection

    md = (tmp_path / "site" / "summary.md").read_text(encoding="utf-8")
    assert (f"| grid.csv | offline | 18 / 20 | {grid_gm:#.3g}× (18) | 1.25× (15) | 3.00× (9) "
            "| 0.800× at 64×256×1024 (cublaslt:3) | 1 |") in md
    llm_gm = (1.5 * 0.9 * 1.2) ** (1 / 3)
    assert (f"| llm | server | 4 | {llm_gm:#.3g}× (3) | {math.sqrt(1.1 * 0.6):#.3g}× (2) | 2.00× (1) "
            "| 0.900× at 8×4096×14336 llama-3.1-8b:down_proj (torch) | 1 |") in md
    assert "## NVIDIA H100 80GB HBM3 · grid.csv · offline · 2026-11-23" in md and "torch 2.9.0 · cuda 13.0" in md


def test_a_folder_stands_for_its_results_files(tmp_path: Path) -> None:
    write(tmp_path, "gemm_a.json", GRID)
    write(tmp_path, "gemm_b.json", LLM)
    write(tmp_path, "eval_speed.json", {"other": 1})  # not a GEMM results file: not picked up
    assert [r["set"] for r in load_results([tmp_path])] == ["grid.csv", "llm"]


def test_missing_values_do_not_crash(tmp_path: Path) -> None:
    untimed = {"gpu": "H100", "shapes": [{"M": 64, "N": 64, "K": 64}, {"M": 64, "N": 128, "K": 64, "choice": None,
                                                                         "speedup_vs_torch": None, "flops": None}]}
    paths = [write(tmp_path, "untimed.json", untimed), write(tmp_path, "empty.json", {"shapes": []})]
    s = summary(untimed)
    assert s["vs_torch"] == {"value": None, "n": 0} and s["worst"] is None and s["not_torch"] is None
    page = render(paths, tmp_path / "site").read_text(encoding="utf-8")
    assert "No shape has a speedup over torch.matmul" in page and "This file holds no shapes yet" in page
    assert "2 shapes measured; " not in page and "Sweep: 2 shapes measured." in page
    assert "| ? | ? | 2 | — | — | — | — | 0 |" in (tmp_path / "site" / "summary.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("content, message", [
    (None, "no results file"),
    ("{", "not valid JSON"),
    ('{"gpu": "H100"}', 'no "shapes" list'),
    ('[{"M": 1, "N": 1, "K": 1}]', 'no "shapes" list'),
    ('{"shapes": {"M": 1}}', 'no "shapes" list'),
    ('{"shapes": [{"M": 1, "N": 2}]}', "needs positive integer M, N and K"),
    ('{"shapes": [{"M": 1, "N": 2, "K": "3"}]}', "needs positive integer M, N and K"),
])
def test_bad_input_is_a_usage_error(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "gemm_bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError, match=message):
        render([path], tmp_path / "site")
    assert not (tmp_path / "site").exists()


def test_no_files_and_an_unwritable_folder_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no GEMM results files"):
        load_results([tmp_path])
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError, match="writable --out"):
        render([write(tmp_path, "gemm_ok.json", GRID)], blocker / "site")



def test_ratio_scale_diverges_at_one_and_saturates() -> None:
    scale = RatioScale.fit([0.5, 1.1, 1.5])
    assert scale.limit == 2.0  # symmetric: 0.5x is as far from 1 as 2x
    assert scale(1.0) == plots.NEUTRAL_COLOR
    assert scale(2.0) == scale(9.0) == plots.FASTER_COLOR and scale(0.5) == scale(0.01) == plots.SLOWER_COLOR
    assert scale.strength(math.sqrt(2)) == pytest.approx(0.5) == -scale.strength(1 / math.sqrt(2))
    assert RatioScale.fit([1.0, 1.01]).limit == 1.25 and RatioScale.fit([1000.0]).limit == 10.0


def test_histogram_has_a_grey_bin_for_ties_and_counts_every_value() -> None:
    chart = plots.ratio_histogram([1.0, 1.0, 1.0, 0.5, 0.7, 2.0, 50.0], 0.5, 2.0)  # 50x goes to the last bin
    bars = re.findall(r'fill="(#\w+)"><title>[^<]*: (\d+)</title>', chart)
    assert sum(int(n) for _, n in bars) == 7
    assert (plots.OTHER_COLOR, "3") in bars
    assert {c for c, _ in bars} == {plots.OTHER_COLOR, plots.SLOWER_COLOR, plots.FASTER_COLOR}


def test_dot_plot_escapes_labels_and_greys_series_past_the_palette() -> None:
    series = [(f"<b>s{i}</b>", [plots.Point(2.0 ** i, 1.1, "<i>tip</i>")]) for i in range(9)]
    chart = plots.dot_plot(series)
    assert "<b>" not in chart and "&lt;b&gt;s8&lt;/b&gt;" in chart and "&lt;i&gt;tip&lt;/i&gt;" in chart
    assert chart.count(f'fill="{plots.OTHER_COLOR}"') == 2 * 2  # legend swatch and dot of series 7 and 8
    with pytest.raises(ValueError):
        plots.dot_plot([("empty", [])])


def test_tuning_records_are_drawn_as_the_tuners_own_results(tmp_path: Path) -> None:
    """`gemm plot` takes `gemm tune`'s records (.jsonl, or .jsonl.gz as committed): per shape the
    choice's time against torch.matmul and autotuned cuBLASLt from the same record, labelled as the
    tuner's own timing; a record without a choice (a failed shape) is left out."""
    import gzip

    def record(m: int, choice: str, choice_ms: float, lt_ms: float | None) -> dict[str, Any]:
        base: dict[str, Any] = {"torch": {"ms": 0.02}}
        if lt_ms:
            base["cublaslt_autotuned"] = {"ms": lt_ms}
        return {"M": m, "N": 256, "K": 1024, "dtype": "float16", "layout": "nn", "source": "cudal2",
                "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "choice": choice, "choice_ms": choice_ms,
                "baselines": base, "tuned_at": "2026-11-27T00:10:00"}

    rows = [record(64, "cublaslt:2", 0.016, 0.018), record(128, "torch", 0.02, None),
            {"M": 256, "N": 256, "K": 1024, "error": "RuntimeError: out of memory"}]
    path = tmp_path / "tune.shard0of4.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    [res] = load_results([path])
    assert (res["set"], res["mode"], res["date"]) == ("cudal2", "tune", "2026-11-27")
    assert "the tuner's own final timing" in res["method"]["timing"]
    got = {s["M"]: (s["choice"], s["speedup_vs_torch"], s["speedup_vs_cublaslt_autotuned"]) for s in res["shapes"]}
    assert got == {64: ("cublaslt:2", pytest.approx(1.25), pytest.approx(1.125)), 128: ("torch", 1.0, None)}
    assert summary(res)["vs_torch"]["value"] == pytest.approx(math.sqrt(1.25))
    empty = tmp_path / "tune.jsonl"
    empty.write_text(json.dumps(rows[2]) + "\n")
    with pytest.raises(UsageError, match="no tuning records with a choice"):
        load_results([empty])


def test_a_bench_with_online_tuning_is_labelled_apart(tmp_path: Path) -> None:
    """The held-out shapes benched twice, with and without tuning on first use, must not read as the
    same run: the `online` field, or in files written before it the method's words, names it."""
    online = {**GRID, "online": True}
    older = {**GRID, "method": {"unmeasured_shapes": "tuned on first use with torch.matmul and cuBLASLt "
                                                     "(WARPFORGE_GEMM_ONLINE)"}}
    paths = [write(tmp_path, "a.json", GRID), write(tmp_path, "b.json", online), write(tmp_path, "c.json", older)]
    render(paths, tmp_path / "site")
    md = (tmp_path / "site" / "summary.md").read_text(encoding="utf-8")
    assert md.count("| grid.csv | offline | 18 / 20 |") == 1
    assert md.count("| grid.csv | offline, online tuning | 18 / 20 |") == 2
    assert md.count("· grid.csv · offline, online tuning · 2026-11-23") == 2
