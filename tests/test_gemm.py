"""The GEMM track on the CPU: Triton kernels (interpreted), choices, tuner rules, resume, table
lookup, dispatcher fallback, benchmark files and the CLI. GPU runs are in test_gemm_gpu.py."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

from warpforge.cli import main  # noqa: E402
from warpforge.config import TimingBudget  # noqa: E402
from warpforge.errors import UsageError  # noqa: E402
from warpforge import jsonl  # noqa: E402
from warpforge.gemm import choices, cublaslt, cutlass_sm90, dispatch, families, shapes, tune  # noqa: E402
from warpforge.gemm.shapes import GemmShape  # noqa: E402
from warpforge.gemm.triton_gemm import TritonConfig, applicable, candidate_configs  # noqa: E402

triton_gemm = pytest.importorskip("warpforge.gemm.triton_gemm")
needs_triton = pytest.mark.skipif(not triton_gemm.HAVE_TRITON, reason="Triton not installed")

TINY_SCREEN = TimingBudget(warmup_ms=0.5, rep_ms=1.0, min_reps=3, max_reps=4)
TINY_FINAL = TimingBudget(warmup_ms=0.5, rep_ms=2.0, min_reps=5, max_reps=6)


def _err(shape: GemmShape, layout: str, fn: choices.GemmFn, seed: int = 0) -> float:
    a, b = choices.make_inputs(shape, layout, "cpu", seed)
    return choices.rel_error(fn(a, b), choices.reference(a, b, layout))


@needs_triton
@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("cfg", [
    TritonConfig("tiled", 16, 32, 32),
    TritonConfig("splitk", 16, 32, 32, split_k=3),
    TritonConfig("streamk", 16, 32, 32),
    TritonConfig("tma", 16, 32, 32),
], ids=lambda c: c.family)
def test_triton_families_match_the_reference_on_edge_tiles(cfg: TritonConfig, layout: str) -> None:
    # M, N, K cut through tiles; K=104 (not a multiple of BK) for the TMA case, 100 (not even a
    # multiple of 8) for the pointer kernels, which need no padding
    shape = GemmShape(37, 72, 104 if cfg.family == "tma" else 100)
    assert applicable(shape, layout, cfg) is None
    assert _err(shape, layout, lambda a, b: triton_gemm.matmul(a, b, cfg, layout)) < choices.tolerance("float16")


@needs_triton
@pytest.mark.parametrize("family", ["splitk", "streamk"])
def test_fixup_counters_are_reset_by_the_kernel(family: str) -> None:
    """The last program of a split tile resets its counter: a second call on the same workspace
    must be as right as the first (a stale counter would make no program write C)."""
    cfg = TritonConfig(family, 16, 32, 32, split_k=4 if family == "splitk" else 1)
    shape = GemmShape(20, 40, 256)
    for seed in (1, 2):
        a, b = choices.make_inputs(shape, "nn", "cpu", seed)
        out = torch.full((20, 40), float("nan"), dtype=torch.float16)
        triton_gemm.launch(a, b, out, cfg, "nn")
        assert choices.rel_error(out, choices.reference(a, b, "nn")) < 1e-3
    ws, counters = triton_gemm._workspace(torch.device("cpu"), 1, 1)
    assert int(counters.abs().sum()) == 0


def test_config_names_round_trip_and_bad_names_fail() -> None:
    for cfg in (TritonConfig("splitk", 16, 64, 128, 4, 4, 8, 8), TritonConfig("tma", 128, 256, 64, 3, 8, ws=True)):
        assert TritonConfig.from_name(cfg.name) == cfg
    with pytest.raises(UsageError, match="not a Triton GEMM configuration"):
        TritonConfig.from_name("triton_warp:BM16")


def test_candidate_configs_follow_the_shape() -> None:
    decode = candidate_configs(GemmShape(1, 4096, 4096), "nt", 132)
    assert decode and all(c.bm == 16 for c in decode) and any(c.split_k > 1 for c in decode)
    unaligned = candidate_configs(GemmShape(4096, 4096, 4100), "nn", 132)
    assert unaligned and not any(c.family == "tma" for c in unaligned)  # TMA needs 16-byte rows
    big = candidate_configs(GemmShape(8192, 8192, 8192), "nn", 132)
    assert any(c.family == "tma" and c.ws for c in big)
    assert not any(c.family in ("splitk", "streamk") for c in big)  # 4096 tiles fill the GPU already
    kheavy = candidate_configs(GemmShape(256, 256, 16384), "nn", 132)
    assert any(c.family == "splitk" for c in kheavy) and any(c.family == "streamk" for c in kheavy)


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_padded_choice_is_exact_for_unaligned_shapes(layout: str) -> None:
    shape = GemmShape(9, 37, 45)
    assert not shape.aligned
    assert _err(shape, layout, choices.padded_choice(layout)) < 1e-3
    a, b = choices.make_inputs(shape, layout, "cpu", 0)
    out = choices.padded_choice(layout)(a, b)
    assert out.shape == (9, 37) and out.is_contiguous()


def test_rel_error_catches_nan_and_wrong_shapes() -> None:
    ref = torch.ones(4, 4)
    assert choices.rel_error(torch.ones(4, 4), ref) == 0
    assert choices.rel_error(torch.full((4, 4), float("nan")), ref) == float("inf")
    assert choices.rel_error(torch.ones(4, 3), ref) == float("inf")


def _settings(**kw: Any) -> tune.TuneSettings:
    return tune.TuneSettings(families=kw.pop("families", ("triton",)), cublaslt=False, max_configs=kw.pop("max_configs", 2),
                             screen=TINY_SCREEN, final=TINY_FINAL, **kw)


def _fake_timings(monkeypatch: pytest.MonkeyPatch, table: dict[str, tuple[float, float]]) -> None:
    """ShapeBench.time returns (median, iqr) from `table` by which choice function it is given."""
    real_fn = tune.ShapeBench.fn

    def fn(self: tune.ShapeBench, name: str) -> choices.GemmFn:
        f = real_fn(self, name)
        f.__dict__["choice_name"] = name if hasattr(f, "__dict__") else None
        return f

    def fake_time(self: tune.ShapeBench, f: Any, budget: TimingBudget, mode: str = "offline", rng: Any = None) -> dict[str, Any]:
        name = getattr(f, "choice_name", "torch")
        ms, iqr = table.get(name, (10.0, 0.1))
        return {"ms": ms, "iqr_ms": iqr, "n": 10, "host_ms": ms}

    def fake_time_many(self: tune.ShapeBench, fns: dict[str, Any], budget: TimingBudget, mode: str = "offline",
                       rng: Any = None, rounds: int = 3) -> dict[str, Any]:
        return {n: fake_time(self, f, budget) for n, f in fns.items()}

    monkeypatch.setattr(tune.ShapeBench, "fn", fn)
    monkeypatch.setattr(tune.ShapeBench, "time", fake_time)
    monkeypatch.setattr(tune.ShapeBench, "time_many", fake_time_many)


def _ours(shape: GemmShape, layout: str = "nn") -> list[str]:
    return tune.our_choices(shape, layout, "cpu", _settings())


@needs_triton
def test_tuner_keeps_torch_unless_a_kernel_wins_beyond_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    shape = GemmShape(32, 64, 64)
    first, second = _ours(shape)
    # 3% faster but the spreads overlap: torch stays
    _fake_timings(monkeypatch, {"torch": (1.00, 0.05), first: (0.97, 0.05), second: (2.0, 0.01)})
    rec = tune.tune_shape(shape, "nn", "cpu", _settings())
    assert rec["choice"] == "torch" and rec["best_baseline"] == "torch"
    # 20 % faster with tight spreads: the kernel wins
    _fake_timings(monkeypatch, {"torch": (1.00, 0.02), first: (0.80, 0.02), second: (2.0, 0.01)})
    rec = tune.tune_shape(shape, "nn", "cpu", _settings())
    assert rec["choice"] == first and rec["choice_ms"] == 0.80
    assert {c["name"]: c["status"] for c in rec["candidates"]}[first] == "ok"


@needs_triton
def test_a_kernel_far_behind_after_its_first_look_is_not_screened_further(monkeypatch: pytest.MonkeyPatch) -> None:
    shape = GemmShape(32, 64, 64)
    first, second = _ours(shape)
    _fake_timings(monkeypatch, {"torch": (1.00, 0.02), first: (1.2, 0.02), second: (2.0, 0.01)})
    rec = tune.tune_shape(shape, "nn", "cpu", _settings())
    entries = {c["name"]: c for c in rec["candidates"]}
    assert "prescreen" in entries[first] and "screen" in entries[first]  # within 1.5x: screened in full
    assert "prescreen" in entries[second] and "screen" not in entries[second] and "first look" in entries[second]["note"]
    assert entries[second]["status"] == "ok" and "final" not in entries[second]
    rec = tune.tune_shape(shape, "nn", "cpu", _settings(prescreen=None))  # off: every kernel screened in full
    assert all("screen" in c and "prescreen" not in c for c in rec["candidates"] if c["status"] == "ok")


@needs_triton
def test_a_shapes_timing_runs_collect_only_what_the_shape_allocated(monkeypatch: pytest.MonkeyPatch) -> None:
    """The heap is frozen while a shape is timed (each timing run's full collection would otherwise
    scan all of torch and Triton, 50 ms a run), and unfrozen after it, also when the shape fails."""
    import gc

    frozen: list[int] = []
    real = tune.time_calls

    def spy(*args: Any, **kwargs: Any) -> Any:
        frozen.append(gc.get_freeze_count())
        return real(*args, **kwargs)

    monkeypatch.setattr(tune, "time_calls", spy)
    before = gc.get_freeze_count()
    rec = tune.tune_shape(GemmShape(32, 64, 64), "nn", "cpu", _settings())
    assert rec["choice"] and frozen and min(frozen) > before
    assert gc.get_freeze_count() == before
    monkeypatch.setattr(tune, "_tune_shape", lambda *a: (_ for _ in ()).throw(RuntimeError("out of memory")))
    with pytest.raises(RuntimeError):
        tune.tune_shape(GemmShape(32, 64, 64), "nn", "cpu", _settings())
    assert gc.get_freeze_count() == before


@needs_triton
def test_tuner_never_picks_a_wrong_kernel_however_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    shape = GemmShape(32, 64, 64)
    first, _ = _ours(shape)
    real = choices.make_choice

    def broken(name: str, layout: str, a: torch.Tensor, b: torch.Tensor) -> choices.GemmFn:
        fn = real(name, layout, a, b)
        if name == first:  # fp16 accumulation, as a too-clever kernel might do
            return lambda x, y: (x @ (y if layout == "nn" else y.t())).to(torch.float16) * 1.01
        return fn

    monkeypatch.setattr(choices, "make_choice", broken)
    _fake_timings(monkeypatch, {"torch": (1.0, 0.01), first: (0.1, 0.001)})
    rec = tune.tune_shape(shape, "nn", "cpu", _settings())
    entry = {c["name"]: c for c in rec["candidates"]}[first]
    assert entry["status"] == "incorrect" and entry["rel_err"] > 1e-3 and "screen" not in entry
    assert rec["choice"] != first


@needs_triton
def test_sweep_appends_as_it_goes_and_resumes(tmp_path: Path) -> None:
    shapes = [GemmShape(16, 32, 32), GemmShape(16, 40, 24)]
    path = tmp_path / "tune.jsonl"
    done = list(tune.sweep(shapes[:1], "nn", "cpu", path, _settings(max_configs=1)))
    assert done[0][1] is not None and len(jsonl.read(path)) == 1
    with open(path, "a") as f:
        f.write('{"M": 16, "N": 40, "K"')  # a record cut short by a crash
    again = list(tune.sweep(shapes, "nn", "cpu", path, _settings(max_configs=1)))
    assert again[0][1] is None and again[1][1] is not None  # first skipped, second tuned
    keys = {tune.record_key(r) for r in jsonl.read(path)}
    assert keys == {(16, 32, 32, "float16", "nn"), (16, 40, 24, "float16", "nn")}


def test_a_shape_that_runs_out_of_memory_is_recorded_and_the_sweep_goes_on(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    shapes = [GemmShape(8192, 128256, 4096), GemmShape(16, 32, 32)]
    path = tmp_path / "tune.jsonl"
    released: list[dict[Any, Any]] = []

    def tune_shape(shape: GemmShape, *args: Any) -> dict[str, Any]:
        cublaslt.CublasLt._plans[("plan of", shape.N)] = object()  # type: ignore[index,assignment]
        if shape.N == 128256:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1002.00 MiB.")
        return {"M": shape.M, "N": shape.N, "K": shape.K, "dtype": shape.dtype, "layout": "nn", "gpu": "cpu",
                "choice": "torch", "choice_ms": 1.0, "baselines": {"torch": {"ms": 1.0}}}

    monkeypatch.setattr(tune, "tune_shape", tune_shape)
    monkeypatch.setattr(tune, "release_memory", lambda device: released.append(dict(cublaslt.CublasLt._plans))
                        or cublaslt.CublasLt.forget_all())
    got = list(tune.sweep(shapes, "nn", "cpu", path, _settings()))
    assert "OutOfMemoryError" in got[0][1]["error"] and got[1][1]["choice"] == "torch"  # type: ignore[index]
    assert [len(r) for r in released] == [1, 1] and not cublaslt.CublasLt._plans  # each shape's plans dropped
    assert [tune.record_key(e) for e in tune.build_table(jsonl.read(path), "cpu")["entries"]] == [(16, 32, 32, "float16", "nn")]
    fits_now = {"M": 8192, "N": 128256, "K": 4096, "dtype": "float16", "layout": "nn", "gpu": "cpu", "choice": "torch",
                "choice_ms": 1.0, "baselines": {"torch": {"ms": 1.0}}}
    monkeypatch.setattr(tune, "tune_shape", lambda *a: fits_now)
    again = [rec for _, rec in tune.sweep(shapes, "nn", "cpu", path, _settings())]
    assert again == [fits_now, None]  # the failed shape is tried again, the tuned one kept


def test_sample_spreads_over_flops() -> None:
    from warpforge.gemm.shapes import shape_set

    grid = shape_set("cudal2")
    picked = tune.sample(grid, 10)
    assert len(picked) == 10 == len(set(picked))
    flops = [s.flops for s in picked]
    assert flops == sorted(flops) and flops[0] < 1e8 and flops[-1] > 5e11  # spread like the whole set
    assert tune.sample(grid[:5], 10) == grid[:5]


def _records() -> list[dict[str, Any]]:
    def rec(m: int, n: int, k: int, choice: str) -> dict[str, Any]:
        return {"M": m, "N": n, "K": k, "dtype": "float16", "layout": "nn", "gpu": "GPU X", "choice": choice,
                "choice_ms": 1.0, "baselines": {"torch": {"ms": 1.2}},
                "cublaslt_algorithms": [{"index": 0}, {"index": 1, "tile": "64x64"}]}
    return [rec(64, 4096, 4096, "triton_splitk:BM16-BN64-BK128-S4-W4-G8-K4"), rec(1024, 1024, 1024, "cublaslt:1"),
            rec(4096, 4096, 4100, "torch_padded"), rec(2048, 2048, 2048, "torch"),
            rec(512, 2048, 4096, "cutlass_64x128x64_c1x1_pingpong")]


def test_table_lookup_exact_nearest_and_fallback() -> None:
    table = dispatch.Table(tune.build_table(_records(), "GPU X"))
    assert table.gpu == "GPU X"
    assert table.lookup("float16", "nn", 1024, 1024, 1024) == ("cublaslt:1", "measured")
    assert table.lookup("float16", "nn", 64, 4096, 4096)[0].startswith("triton_splitk")
    # a nearby unmeasured shape takes our kernel from the nearest bucket ...
    assert table.lookup("float16", "nn", 48, 4096, 3072) == (table.lookup("float16", "nn", 64, 4096, 4096)[0], "nearest")
    # ... but never a cuBLASLt algorithm index (problem-specific), another alignment class, or a far shape
    assert table.lookup("float16", "nn", 1000, 1024, 1024) == ("torch", "default")
    assert table.lookup("float16", "nn", 4000, 4096, 4096) == ("torch", "default")
    assert table.lookup("float16", "nn", 4000, 4096, 4092) == ("torch_padded", "nearest")
    assert table.lookup("float16", "nn", 64, 40000, 4096) == ("torch", "default")
    assert table.lookup("bfloat16", "nn", 64, 4096, 4096) == ("torch", "default")
    # nor a CUTLASS configuration (measured slower on held-out shapes), though it is the nearest one
    assert table.lookup("float16", "nn", 448, 2368, 3968) == ("torch", "default")
    assert table.nearest("float16", "nn", 448, 2368, 3968) == "cutlass_64x128x64_c1x1_pingpong"
    assert table.nearest("float16", "nn", 1000, 1024, 1024) == "cublaslt:1"
    assert table.nearest("float16", "nn", 64, 40000, 4096) is None
    scans: list[tuple[int, ...]] = []  # a lookup is on every matmul call: each shape scans the table once
    scan = table._scan
    table._scan = lambda *key: scans.append(key[2:]) or scan(*key)  # type: ignore[method-assign]
    for _ in range(3):
        table.lookup("float16", "nn", 48, 4096, 3072)
        table.nearest("float16", "nn", 47, 4096, 3072)
    assert scans == [(47, 4096, 3072)]  # (48, ...) was scanned above, before the count
    assert tune.build_table(_records(), "GPU X")["entries"][0]["M"] == 64
    # an entry of our kernel names the fastest baseline where it was measured, to run where it cannot
    with_base = [dict(r, best_baseline="cublaslt:1" if r["M"] == 512 else "torch") for r in _records()]
    built = dispatch.Table(tune.build_table(with_base, "GPU X"))
    assert built.fallbacks == {("float16", "nn", 512, 2048, 4096): "cublaslt:1"}
    with pytest.raises(UsageError, match="no tuning records"):
        tune.build_table(_records(), "GPU Y")


def test_cublaslt_choice_names_parse_and_refuse_nonsense() -> None:
    assert cublaslt.parse_cublaslt("cublaslt:3") == (3, {})
    assert cublaslt.parse_cublaslt("cublaslt:0/splitk8") == (0, {"split_k": 8})
    assert cublaslt.parse_cublaslt("cublaslt:2/swz0") == (2, {"cta_swizzling": 0})
    for bad in ("cublaslt:", "cublaslt:x", "cublaslt:1/splitk", "cublaslt:1/swz2", "cublaslt:1/tile64"):
        with pytest.raises(UsageError, match="not a cuBLASLt choice"):
            cublaslt.parse_cublaslt(bad)


def test_cublaslt_variants_stay_within_the_algorithms_capabilities() -> None:
    from types import SimpleNamespace

    both = SimpleNamespace(splitk_support=1, reduction_scheme_mask=0b110, cta_swizzling_support=1)
    names = cublaslt.variant_names(1, both, {"split_k": 1, "cta_swizzling": 0}, K=2048)
    # each part keeps >= 256 of K (2048 / 16 = 128 is too few); swizzling flipped from off to on
    assert names == ["cublaslt:1/splitk2", "cublaslt:1/splitk4", "cublaslt:1/splitk8", "cublaslt:1/swz1"]
    assert all(cublaslt.parse_cublaslt(n)[0] == 1 for n in names)
    assert cublaslt.reduction_scheme(both) == 2  # in place is not in this mask: the compute-type workspace
    assert cublaslt.variant_names(0, both, {"split_k": 4, "cta_swizzling": 1}, K=1024) == \
        ["cublaslt:0/splitk2", "cublaslt:0/swz0"]  # what it already does is not a variant
    none = SimpleNamespace(splitk_support=1, reduction_scheme_mask=0, cta_swizzling_support=0)
    assert cublaslt.variant_names(0, none, {}, K=1 << 14) == []  # split-K without a reduction scheme cannot run
    assert cublaslt.variant_names(0, SimpleNamespace(), {}, K=1 << 14) == []


def test_a_reconfigured_cublaslt_choice_reaches_the_table_with_its_settings() -> None:
    records = _records()
    records[1] = {**records[1], "choice": "cublaslt:1/splitk4",
                  "cublaslt_variants": {"cublaslt:1/splitk4": {"index": 1, "name": "cublaslt:1/splitk4", "split_k": 4}}}
    table = tune.build_table(records, "GPU X")
    entry = next(e for e in table["entries"] if e["M"] == 1024)
    assert entry["choice"] == "cublaslt:1/splitk4" and entry["cublaslt_algorithm"]["split_k"] == 4
    assert dispatch.Table(table).lookup("float16", "nn", 1024, 1024, 1024) == ("cublaslt:1/splitk4", "measured")
    assert dispatch.Table(table).lookup("float16", "nn", 1000, 1024, 1024) == ("torch", "default")


def test_table_files_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        dispatch.Table.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(UsageError, match="not valid JSON"):
        dispatch.Table.load(bad)
    bad.write_text('{"entries": 3}')
    with pytest.raises(UsageError, match="not a warpforge GEMM table"):
        dispatch.Table.load(bad)


def test_online_tuning_of_unmeasured_shapes_is_opt_in_once_and_read_back(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """WARPFORGE_GEMM_ONLINE=1: a shape no table serves is tuned on first use (torch.matmul and
    cuBLASLt only), recorded, and read back by a later process instead of tuned again; never while
    a CUDA graph is captured; a tuning that fails sends the shape to torch.matmul, not to a retry."""
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    monkeypatch.setattr(torch.cuda, "device", lambda device: __import__("contextlib").nullcontext())
    capturing = [False]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    tuned: list[tuple[Any, ...]] = []

    def fake_tune(shape: GemmShape, layout: str, device: str, settings: Any) -> dict[str, Any]:
        tuned.append((shape.M, shape.N, shape.K, layout, settings.families, settings.cublaslt, settings.kernels))
        if shape.M == 13:
            raise RuntimeError("CUDA out of memory")
        return {"M": shape.M, "N": shape.N, "K": shape.K, "dtype": shape.dtype, "layout": layout, "gpu": "Fake GPU",
                "choice": "cublaslt:3", "choice_ms": 0.01, "baselines": {"torch": {"ms": 0.011}}}

    monkeypatch.setattr(tune, "tune_shape", fake_tune)
    dispatch.reset()
    dev = torch.device("cpu")
    monkeypatch.delenv(dispatch.ONLINE, raising=False)
    assert dispatch.online_choice(dev, "float16", "nn", 64, 128, 256) is None  # off by default
    monkeypatch.setenv(dispatch.ONLINE, "1")
    capturing[0] = True
    assert dispatch.online_choice(dev, "float16", "nn", 64, 128, 256) is None and not tuned
    capturing[0] = False
    assert dispatch.online_choice(dev, "float16", "nn", 64, 128, 256) == "cublaslt:3"
    assert tuned == [(64, 128, 256, "nn", (), True, ())]  # cuBLASLt and torch only, none of our families
    assert dispatch.online_choice(dev, "float16", "nn", 64, 128, 256) == "cublaslt:3" and len(tuned) == 1
    records = jsonl.read(dispatch.online_records("Fake GPU"))
    assert [(r["M"], r["choice"]) for r in records] == [(64, "cublaslt:3")]
    dispatch.reset()  # a later process: read back, not tuned again
    assert dispatch.online_choice(dev, "float16", "nn", 64, 128, 256) == "cublaslt:3" and len(tuned) == 1
    assert dispatch.online_choice(dev, "float16", "nt", 64, 128, 256) == "cublaslt:3" and len(tuned) == 2
    assert dispatch.online_choice(dev, "float16", "nn", 13, 128, 256) == "torch"
    assert dispatch.online_choice(dev, "float16", "nn", 13, 128, 256) == "torch" and len(tuned) == 3
    assert len(jsonl.read(dispatch.online_records("Fake GPU"))) == 2  # the failure is not recorded as a choice
    # the nearest measured shape's kernel is timed beside them; a cuBLASLt index or torch is not passed on
    near = "cutlass_64x128x64_c1x1_pingpong"
    assert dispatch.online_choice(dev, "float16", "nn", 448, 2368, 3968, near) == "cublaslt:3"
    assert tuned[-1] == (448, 2368, 3968, "nn", (), True, (near,))
    dispatch.online_choice(dev, "float16", "nn", 96, 128, 256, "cublaslt:1")
    dispatch.online_choice(dev, "float16", "nn", 160, 128, 256, "torch")
    assert [t[-1] for t in tuned[-2:]] == [(), ()]
    dispatch.reset()


def test_dispatcher_falls_back_to_torch_off_the_gpu() -> None:
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    assert dispatch.choose(a, b)[0] == "torch"
    assert torch.equal(dispatch.matmul(a, b), a @ b)
    bt = b.t().contiguous().t()  # a column-major operand: torch.matmul of the same operands, bit for bit
    assert torch.equal(dispatch.matmul(a, bt), a @ bt)  # (BLAS may round a @ b differently for this layout)
    x = torch.randn(2, 5, 7)
    assert torch.equal(dispatch.matmul(x, b), x @ b)
    if hasattr(torch.ops.warpforge, "matmul"):
        assert torch.equal(torch.ops.warpforge.matmul(a, b), a @ b)


def test_a_choice_that_cannot_be_built_here_runs_its_fallback_or_torch(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """A table choice that cannot be made here runs the entry's fallback (the fastest baseline where
    it was measured), else torch.matmul, and that is remembered. A CUTLASS choice whose library is
    not built is not built by a matmul call unless WARPFORGE_CUTLASS_BUILD=1."""
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    asked = [("file:/gone/kernel.py", None)]
    monkeypatch.setattr(dispatch, "_choose", lambda a, b: (asked[0][0], "table", asked[0][1]))
    made: list[str] = []

    def make(name: str, layout: str, x: torch.Tensor, y: torch.Tensor) -> Any:
        made.append(name)
        if name.startswith(("file:", "cutlass_")):
            raise UsageError(f"{name} cannot be made here")
        return lambda p, q: p @ q

    monkeypatch.setattr(choices, "make_choice", make)
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path))  # no CUTLASS library built there
    monkeypatch.delenv("WARPFORGE_CUTLASS_LIB_DIR", raising=False)
    monkeypatch.delenv(cutlass_sm90.CUTLASS_BUILD, raising=False)
    dispatch.forget_kernels()
    try:
        assert torch.allclose(dispatch.matmul(a, b), a @ b)
        assert [hit[0] for hit in dispatch._fns.values()] == ["torch"]  # remembered: not refused again per call
        dispatch.matmul(a, b)
        assert made == ["file:/gone/kernel.py"]
        dispatch.forget_kernels()
        asked[0] = ("file:/gone/kernel.py", "torch_padded")
        assert dispatch.choose(a, b) == ("file:/gone/kernel.py", "table")  # not run yet: what the table says
        dispatch.matmul(a, b)
        assert [hit[0] for hit in dispatch._fns.values()] == ["torch_padded"]
        assert dispatch.choose(a, b) == ("torch_padded", "table; file:/gone/kernel.py cannot run here")  # what ran
        dispatch.forget_kernels()
        made.clear()
        asked[0] = ("cutlass_128x128x64_c1x1_coop", "torch_padded")  # not built: not even tried
        dispatch.matmul(a, b)
        cutlass = families.named("cutlass")
        assert made == ["torch_padded"] and not cutlass.ready("cutlass_128x128x64_c1x1_coop", "float16", "nn")
        dispatch.forget_kernels()
        made.clear()
        monkeypatch.setenv(cutlass_sm90.CUTLASS_BUILD, "1")  # asked to build: tried (and here it fails)
        assert cutlass.ready("cutlass_128x128x64_c1x1_coop", "float16", "nn")
        dispatch.matmul(a, b)
        assert made == ["cutlass_128x128x64_c1x1_coop", "torch_padded"]
    finally:
        dispatch.forget_kernels()


def test_build_cutlass_builds_every_config_of_the_layouts_and_says_what_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from warpforge.gemm import cutlass_build, cutlass_sm90

    monkeypatch.setattr(cutlass_build, "include_dir", lambda: tmp_path)
    asked: list[tuple[str, str, str, Path | None]] = []

    def fake_build(cfg: Any, dtype: str, layout: str, out_dir: Path | None = None) -> Path:
        asked.append((cfg.name, dtype, layout, out_dir))
        if cfg.name == "cutlass_128x128x64_c1x1_coop" and layout == "nt":
            raise UsageError("CUTLASS cutlass_128x128x64_c1x1_coop (float16, nt, sm_90a) does not compile:\nerror: x")
        return tmp_path / f"{cfg.name}_{layout}.so"

    monkeypatch.setattr(cutlass_build, "build", fake_build)
    assert main(["gemm", "build-cutlass", "--out", str(tmp_path / "libs"), "--jobs", "2"]) == 1
    n = len(cutlass_sm90.configs())
    assert len(asked) == 2 * n and {a[2] for a in asked} == {"nn", "nt"} and {a[3] for a in asked} == {tmp_path / "libs"}
    err = capsys.readouterr().err
    assert f"{2 * n - 1} of {2 * n} CUTLASS libraries ready" in err
    assert "cutlass_128x128x64_c1x1_coop float16 nt: CUTLASS cutlass_128x128x64_c1x1_coop" in err
    asked.clear()
    assert main(["gemm", "build-cutlass", "--layouts", "nn", "--dtype", "bfloat16"]) == 0
    assert len(asked) == n and {(a[1], a[2], a[3]) for a in asked} == {("bfloat16", "nn", None)}
    assert main(["gemm", "build-cutlass", "--layouts", "tn"]) == 2
    assert main(["gemm", "build-cutlass", "--jobs", "0"]) == 2


def test_records_of_another_gpu_do_not_count_as_tuned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shape = GemmShape(16, 32, 32)
    elsewhere = {"M": 16, "N": 32, "K": 32, "dtype": "float16", "layout": "nn", "gpu": "NVIDIA H200", "choice": "torch",
                 "choice_ms": 1.0, "baselines": {"torch": {"ms": 1.0}}}
    jsonl.append(tmp_path / "tune.committed.jsonl", [elsewhere])  # as gemm_gpu.sh's RECORDS= puts them
    here = dict(elsewhere, gpu="cpu")
    monkeypatch.setattr(tune, "tune_shape", lambda *args: here)
    got = [rec for _, rec in tune.sweep([shape], "nn", "cpu", tmp_path / "tune.jsonl", _settings())]
    assert got == [here]
    assert [rec for _, rec in tune.sweep([shape], "nn", "cpu", tmp_path / "tune.jsonl", _settings())] == [None]


def test_gpu_slug() -> None:
    assert shapes.gpu_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert shapes.gpu_slug("NVIDIA H200") == "h200"


def test_bench_writes_results_files_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from warpforge.gemm import bench

    settings = bench.BenchSettings(modes=("offline", "server"), cublaslt=False, final=TINY_FINAL,
                                   server=dataclasses.replace(TINY_FINAL, server_gap_ms=(0.1, 0.2)), screen=TINY_SCREEN)
    shapes = [GemmShape(8, 16, 24), GemmShape(8, 24, 16)]
    frozen: list[int] = []
    real = bench.bench_shape
    monkeypatch.setattr(bench, "bench_shape", lambda *a: frozen.append(gc.get_freeze_count()) or real(*a))
    paths = bench.bench(shapes[:1], "mine.csv", "nn", "cpu", tmp_path, settings, planned=2)
    assert frozen and frozen[0] > 0 == gc.get_freeze_count()  # each shape's timing runs skip the frozen heap
    assert [p.name.split("_")[-2] for p in paths] == ["offline", "server"]
    assert all(p.name.startswith("gemm_cpu_mine_") for p in paths)
    seen: list[Any] = []
    bench.bench(shapes, "mine.csv", "nn", "cpu", tmp_path, settings, planned=2, on_shape=lambda s, r: seen.append(r))
    assert seen[0] is None and seen[1] is not None  # the first shape was kept from the first run
    doc = json.loads(paths[0].read_text())
    assert doc["set"] == "mine.csv" and doc["mode"] == "offline" and doc["sweep"] == {
        "planned": 2, "measured": 2, "note": "the whole set"}
    row = doc["shapes"][0]
    for key in ("M", "N", "K", "dtype", "torch_ms", "cublaslt_heuristic_ms", "cublaslt_autotuned_ms", "choice",
                "warpforge_ms", "speedup_vs_torch", "speedup_vs_cublaslt_autotuned", "torch_nt_ms", "rel_err"):
        assert key in row
    assert row["choice"] == "torch" and row["speedup_vs_torch"] == 1.0 and row["rel_err"] < 1e-3


def test_bench_compiles_every_shape_afresh_without_cuda_graphs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Dynamo stops compiling one function after 8 shapes and runs it eagerly; the baseline must not
    # quietly become torch.matmul, nor time Inductor's CUDA-graph input copies
    from warpforge.gemm import bench

    events: list[str] = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: events.append("reset"))

    def fake_compile(fn: Any, mode: str, dynamic: bool) -> Any:
        events.append(f"compile {mode}")
        return fn
    monkeypatch.setattr(torch, "compile", fake_compile)
    settings = bench.BenchSettings(modes=("offline",), cublaslt=False, final=TINY_FINAL,
                                   screen=TINY_SCREEN, compile_shapes=3)
    shapes = [GemmShape(8, 16, 24), GemmShape(8, 24, 16), GemmShape(16, 8, 8)]
    path, = bench.bench(shapes, "mine.csv", "nn", "cpu", tmp_path, settings, planned=3)
    assert events == ["reset", "compile max-autotune-no-cudagraphs"] * 3
    assert all(r["compile_ms"] and r["compile_rel_err"] < 1e-3 for r in json.loads(path.read_text())["shapes"])


def test_cli_shapes_and_clear_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["gemm", "shapes", "--shapes", "cudal2", "--sample", "3", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3
    if not torch.cuda.is_available():
        assert main(["gemm", "tune", "--shapes", "llm"]) == 2
        assert "no CUDA GPU" in capsys.readouterr().err
    assert main(["gemm", "bench", "--shapes", str(tmp_path / "none.csv"), "--device", "cpu"]) == 2
    assert "no shape set or file" in capsys.readouterr().err
    assert main(["gemm", "bench", "--modes", "fast", "--device", "cpu"]) == 2
    empty = tmp_path / "t.jsonl"
    empty.write_text("")
    assert main(["gemm", "table", str(empty), "--out", str(tmp_path / "x.json")]) == 2
    assert main(["gemm", "table", str(tmp_path / "gone.jsonl"), "--out", str(tmp_path / "x.json")]) == 2
    assert "no such records file" in capsys.readouterr().err


def test_cli_table_merges_records_files_and_the_last_file_wins(tmp_path: Path) -> None:
    def record(M: int, choice: str, gpu: str = "GPU A") -> dict[str, object]:
        return {"M": M, "N": 64, "K": 64, "dtype": "float16", "layout": "nn", "gpu": gpu, "choice": choice,
                "choice_ms": 0.01, "baselines": {"torch": {"ms": 0.02}}}
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    jsonl.append(old, [record(16, "torch"), record(32, "torch_padded")])
    jsonl.append(new, [{**record(16, "triton_tiled:BM16-BN64-BK64-S3-W4-G8"), "torch": "2.11.0+cu130"}])
    out = tmp_path / "table.json"
    assert main(["gemm", "table", str(old), str(new), "--out", str(out)]) == 0
    table = json.loads(out.read_text())
    assert {e["M"]: e["choice"] for e in table["entries"]} == {16: "triton_tiled:BM16-BN64-BK64-S3-W4-G8", 32: "torch_padded"}
    assert table["torch"] == "2.11.0+cu130"  # what the records were measured with, not this process's torch
    jsonl.append(new, [record(64, "torch", gpu="GPU B")])
    assert main(["gemm", "table", str(old), str(new), "--out", str(out)]) == 2  # two GPUs, none named
    assert main(["gemm", "table", str(old), str(new), "--gpu", "GPU B", "--out", str(out)]) == 0
    assert [e["M"] for e in json.loads(out.read_text())["entries"]] == [64]


@needs_triton
def test_cli_tune_on_cpu_writes_records_and_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("M,N,K\n16,32,32\n")
    args = ["gemm", "tune", "--shapes", str(shapes), "--device", "cpu", "--out", str(tmp_path), "--no-cublaslt",
            "--quick", "--families", "triton"]
    assert main(args) == 0
    table = json.loads((tmp_path / "table.json").read_text())
    assert table["gpu"] == "cpu" and len(table["entries"]) == 1 and table["torch"] == torch.__version__
    assert len(jsonl.read(tmp_path / "tune.jsonl")) == 1


def test_time_many_interleaves_rounds_and_keeps_every_sample() -> None:
    sb = tune.ShapeBench(GemmShape(8, 8, 8), "nn", "cpu")
    budget = TimingBudget(warmup_ms=0.1, rep_ms=0.5, min_reps=6, max_reps=9)
    out = sb.time_many({"torch": choices.torch_choice("nn"), "other": sb.other_layout()[1]}, budget, rounds=3)
    assert set(out) == {"torch", "other"}
    assert all(v["n"] >= 6 and v["ms"] > 0 and v["iqr_ms"] >= 0 for v in out.values())  # 3 rounds x >= 2 calls


CANDIDATE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A.float(), B.t().float()).to(A.dtype){wrong}
"""


def test_gemm_task_feeds_the_optimisation_loop_and_its_kernels_the_tuner(tmp_path: Path) -> None:
    """`warpforge gemm task` writes a task the evaluator accepts; a kernel for it (here a plain
    PyTorch rewrite) is then a `file:` choice of the tuner, verified like every other choice."""
    from warpforge import Candidate, EvalConfig, evaluate, load_task

    task_path = tmp_path / "task.py"
    assert main(["gemm", "task", "100x37x45", "--layout", "nt", "--out", str(task_path)]) == 0
    task = load_task(str(task_path))
    assert task.sizes("gpu") == {"M": 100, "N": 37, "K": 45} and task.sizes("cpu")["K"] % 8 == 45 % 8
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(CANDIDATE.format(wrong=""))
    bad.write_text(CANDIDATE.format(wrong=" * 1.01"))
    result = evaluate(task, Candidate.from_file(good), EvalConfig(device="cpu", bench=False))
    assert result.correct, result.reason
    settings = _settings(families=(), candidates=(str(good), str(bad)))
    rec = tune.tune_shape(GemmShape(100, 37, 45), "nt", "cpu", settings)
    status = {c["name"].rsplit("/", 1)[-1]: c["status"] for c in rec["candidates"]}
    assert status["good.py"] == "ok" and status["bad.py"] == "incorrect"
    assert not rec["choice"].endswith("bad.py")
    with pytest.raises(UsageError, match="defines no class ModelNew"):
        (tmp_path / "none.py").write_text("x = 1\n")
        choices.make_choice(f"file:{tmp_path / 'none.py'}", "nn", torch.ones(1, 1), torch.ones(1, 1))
    assert main(["gemm", "task", "4096x4096"]) == 2


@needs_triton
def test_cli_tune_shards_share_one_folder_and_one_table(tmp_path: Path) -> None:
    """--shard I/N (what --gpus runs on each GPU): each shard tunes every N-th shape into its own
    records file; the table covers all shards; a re-run of a shard skips what is recorded."""
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("M,N,K\n16,32,32\n16,40,24\n8,16,16\n")
    base = ["gemm", "tune", "--shapes", str(shapes), "--device", "cpu", "--out", str(tmp_path), "--no-cublaslt",
            "--quick", "--families", "triton"]
    assert main([*base, "--shard", "0/2"]) == 0 and main([*base, "--shard", "1/2"]) == 0
    assert [len(jsonl.read(p)) for p in tune.record_files(tmp_path)] == [2, 1]
    table = json.loads((tmp_path / "table.json").read_text())
    assert sorted((e["M"], e["N"], e["K"]) for e in table["entries"]) == [(8, 16, 16), (16, 32, 32), (16, 40, 24)]
    assert main([*base, "--shard", "1/2"]) == 0
    assert len(jsonl.read(tmp_path / "tune.shard1of2.jsonl")) == 1  # skipped, not tuned again
    assert main([*base, "--shard", "2/2"]) == 2
    assert main([*base, "--gpus", "0,1"]) == 2  # needs CUDA


def test_stopping_a_multi_gpu_tune_stops_its_shards(tmp_path: Path) -> None:
    """`timeout` signals only `gemm tune --gpus`'s own process: its shard processes must stop with
    it, or they go on timing beside whatever the GPUs are given next."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(
        "import subprocess, sys\n"
        "from warpforge.cli.gemm import _wait_shards\n"
        "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']) for _ in range(2)]\n"
        "print(' '.join(str(k.pid) for k in kids), flush=True)\n"
        "_wait_shards([(str(i), k, open(__file__)) for i, k in enumerate(kids)])\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=60) == 128 + signal.SIGTERM
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_tuning_stops_before_it_starts_when_a_part_it_was_asked_for_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without nvmath-python (cuBLASLt) or any CUTLASS library, `gemm tune` and `gemm bench` on the
    GPU stop with what to do, instead of recording every shape without them."""
    import argparse
    import importlib.util

    from warpforge.cli import gemm as gemm_cli
    from warpforge.gemm import cutlass_build

    args = argparse.Namespace(device="cuda", no_cublaslt=False, families="triton,cutlass", dtype="float16")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nvmath" else real_find_spec(name, *a))
    with pytest.raises(UsageError, match="nvmath-python, which is not installed.*--no-cublaslt"):
        gemm_cli._need_cublaslt(args)
    gemm_cli._need_cublaslt(argparse.Namespace(device="cuda", no_cublaslt=True))
    gemm_cli._need_cublaslt(argparse.Namespace(device="cpu", no_cublaslt=False))

    asked: list[tuple[str, str]] = []

    def no_library(cfg: Any, dtype: str, layout: str) -> Any:
        asked.append((dtype, layout))
        raise UsageError("CUTLASS headers not found")

    monkeypatch.setattr(cutlass_build, "build", no_library)
    with pytest.raises(UsageError, match="cutlass family cannot run here: CUTLASS headers not found.*--families"):
        gemm_cli._need_cutlass(args, "nt")
    assert asked == [("float16", "nt")]
    gemm_cli._need_cutlass(argparse.Namespace(device="cuda", families="triton,mma", dtype="float16"), "nt")
    gemm_cli._need_cutlass(argparse.Namespace(device="cpu", families="cutlass", dtype="float16"), "nt")
    assert len(asked) == 1


def test_shipped_tables_name_only_choices_that_exist() -> None:
    from importlib import resources

    from warpforge.gemm import cutlass_sm90
    from warpforge.gemm.cuda_mma import MmaConfig

    tables = [p for p in (resources.files("warpforge.gemm") / "tables").iterdir() if p.name.endswith(".json")]
    assert tables, "no GEMM table shipped"
    for path in tables:
        data = json.loads(path.read_text())
        table = dispatch.Table(data, path.name)
        assert shapes.gpu_slug(table.gpu) + ".json" == path.name
        for (dtype, layout, m, n, k), choice in table.entries.items():
            assert dtype in ("float16", "bfloat16") and layout in ("nn", "nt") and min(m, n, k) >= 1
            if choice.startswith("triton_"):
                TritonConfig.from_name(choice)
            elif choice.startswith("mma_"):
                MmaConfig.from_name(choice)
            elif choice.startswith("cublaslt:"):
                index, changed = cublaslt.parse_cublaslt(choice)  # a reconfiguration is named within what parses
                assert index >= 0 and set(changed) <= {"split_k", "cta_swizzling"}
            elif choice.startswith("cutlass_"):
                cutlass_sm90.parse_choice(choice)
            else:
                assert choice in ("torch", "torch_padded"), choice
        for key, fallback in table.fallbacks.items():  # a baseline, where the choice is one of our kernels
            assert fallback.startswith(("cublaslt:", "torch_padded")) and not table.entries[key].startswith(
                ("cublaslt:", "torch")), (key, fallback)
            if fallback.startswith("cublaslt:"):
                cublaslt.parse_cublaslt(fallback)


def test_jsonl_append_survives_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    assert jsonl.read(path) == []
    jsonl.append(path, [{"a": 1}])
    with open(path, "a") as f:
        f.write('{"a": 2, "b"')  # a crash mid-write
    jsonl.append(path, [{"a": 3}, {"a": 4}])
    assert jsonl.read(path) == [{"a": 1}, {"a": 3}, {"a": 4}]
    assert jsonl.write(path, [{"x": 0}]) == 1 and jsonl.read(path) == [{"x": 0}]
