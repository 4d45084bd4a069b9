"""One interface for GEMM families (issue 41, part 2): a family added in one module (gemm_toy_family.py)
and one registry line is tuned, tabled, dispatched and named on the command line like the built-in
ones, on the CPU; every shipped choice is owned by exactly one family; and the dispatcher, the
tuner and the benchmark match no choice name by its prefix."""

from __future__ import annotations

import ast
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import torch

import gemm_toy_family as toy
from warpforge import jsonl
from warpforge.cli import main
from warpforge.gemm import choices, dispatch, families, tune
from warpforge.gemm.shapes import GemmShape

TINY = dict(warmup_ms=0.2, rep_ms=0.5, min_reps=3, max_reps=4)


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> toy.ToyFamily:
    """The toy family, registered the way a new family is: one more line in families.REGISTERED."""
    monkeypatch.setattr(families, "REGISTERED", (*families.REGISTERED, toy.FAMILY))
    toy.FAMILY.calls = 0
    return toy.FAMILY


def _settings(**kw: Any) -> tune.TuneSettings:
    return tune.TuneSettings(**{"families": ("toy",), "cublaslt": False, "screen": dict(TINY), "final": dict(TINY), **kw})


def _timed_by_name(monkeypatch: pytest.MonkeyPatch, times: dict[str, float]) -> None:
    """ShapeBench reports `times[choice]` ms (spread 1 %) for the choice a function was made for."""
    made = tune.ShapeBench.fn
    names: dict[Any, str] = {}

    def fn(self: tune.ShapeBench, name: str) -> choices.GemmFn:
        f = made(self, name)
        g: choices.GemmFn = lambda a, b: f(a, b)  # one function per choice, known by it below
        names[g] = name
        return g

    def time(self: tune.ShapeBench, f: Any, budget: dict[str, Any], mode: str = "offline", rng: Any = None) -> dict[str, Any]:
        ms = times.get(names.get(f, ""), 10.0)
        return {"ms": ms, "iqr_ms": ms / 100, "n": 10, "host_ms": ms}

    monkeypatch.setattr(tune.ShapeBench, "fn", fn)
    monkeypatch.setattr(tune.ShapeBench, "time", time)
    monkeypatch.setattr(tune.ShapeBench, "time_many", lambda self, fns, budget, mode="offline", rng=None, rounds=3:
                        {n: time(self, f, budget) for n, f in fns.items()})


def test_a_toy_family_is_tuned_tabled_and_dispatched(registered: toy.ToyFamily, monkeypatch: pytest.MonkeyPatch) -> None:
    shape = GemmShape(16, 32, 48)
    a, b = choices.make_inputs(shape, "nn", "cpu", 0)
    assert choices.rel_error(choices.make_choice("toy_bk16", "nn", a, b)(a, b), choices.reference(a, b, "nn")) < 1e-3
    assert families.family_of("toy_bk8") is registered and "toy" in families.searched()
    # the tuner lists what the family offers and `why_not` lets through (K = 48: slices of 8 and 16)
    assert tune.our_choices(shape, "nn", "cpu", _settings()) == ["toy_bk8", "toy_bk16"]
    assert tune.our_choices(shape, "nn", "cpu", _settings(families=())) == []  # only when asked for

    _timed_by_name(monkeypatch, {"torch": 1.0, "toy_bk8": 1.5, "toy_bk16": 0.7})
    record = tune.tune_shape(shape, "nn", "cpu", _settings())
    entries = {c["name"]: c for c in record["candidates"]}
    assert record["choice"] == "toy_bk16" and record["best_baseline"] == "torch"
    assert entries["toy_bk16"]["kind"] == "ours" and entries["toy_bk16"]["rel_err"] < 1e-3
    assert registered.calls > 0  # verified on the tuner's operands, not only named

    table = dispatch.Table(tune.build_table([record], "cpu"))
    assert table.lookup("float16", "nn", 16, 32, 48) == ("toy_bk16", "measured")
    assert table.lookup("float16", "nn", 24, 40, 64) == ("toy_bk16", "nearest")  # the family is `transferred`

    # the dispatcher runs a table's toy choice (CPU operands reach no table on their own: _choose stands in)
    monkeypatch.setattr(dispatch, "_choose", lambda a, b: ("toy_bk16", "measured", None))
    dispatch.forget_kernels()
    try:
        before = registered.calls
        out = dispatch.matmul(a, b)
        assert registered.calls == before + 1 and choices.rel_error(out, choices.reference(a, b, "nn")) < 1e-3
        assert [hit[0] for hit in dispatch._fns.values()] == ["toy_bk16"]
    finally:
        dispatch.forget_kernels()


def test_tuning_on_first_use_times_the_nearest_toy_kernel(registered: toy.ToyFamily, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path))
    monkeypatch.setenv(dispatch.ONLINE, "1")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    monkeypatch.setattr(torch.cuda, "device", lambda device: __import__("contextlib").nullcontext())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    asked: list[tuple[str, ...]] = []

    def fake_tune(shape: GemmShape, layout: str, device: str, settings: tune.TuneSettings) -> dict[str, Any]:
        asked.append(settings.kernels)
        return {"M": shape.M, "N": shape.N, "K": shape.K, "dtype": shape.dtype, "layout": layout, "gpu": "Fake GPU",
                "choice": "torch", "choice_ms": 1.0, "baselines": {"torch": {"ms": 1.0}}}

    monkeypatch.setattr(tune, "tune_shape", fake_tune)
    dispatch.reset()
    try:
        dispatch.online_choice(torch.device("cpu"), "float16", "nn", 64, 128, 256, "toy_bk16")
        dispatch.online_choice(torch.device("cpu"), "float16", "nn", 64, 128, 512, "cublaslt:1")
        assert asked == [("toy_bk16",), ()]  # the family is `timed_online`; a cuBLASLt index is not handed on
    finally:
        dispatch.reset()


def test_gemm_tune_takes_the_family_by_name(registered: toy.ToyFamily, tmp_path: Path) -> None:
    """`warpforge gemm tune --families toy` on the CPU, timed for real: the family's choices are
    verified and screened beside torch.matmul, and a table is written whatever wins."""
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("M,N,K\n16,32,48\n")
    args = ["gemm", "tune", "--shapes", str(shapes), "--device", "cpu", "--out", str(tmp_path), "--no-cublaslt",
            "--quick", "--families", "toy"]
    assert main(args) == 0
    [record] = jsonl.read(tmp_path / "tune.jsonl")
    status = {c["name"]: c["status"] for c in record["candidates"]}
    assert status == {"torch": "ok", "toy_bk8": "ok", "toy_bk16": "ok"}
    assert json.loads((tmp_path / "table.json").read_text())["entries"][0]["choice"] in status
    assert main([*args[:-1], "nonesuch"]) == 2  # a family nobody registered


def test_every_shipped_choice_is_owned_by_exactly_one_family() -> None:
    for path in (p for p in (resources.files("warpforge.gemm") / "tables").iterdir() if p.name.endswith(".json")):
        table = dispatch.Table(json.loads(path.read_text()), path.name)
        for key, choice in table.entries.items():
            owners = [f for f in families.REGISTERED if f.owns(choice)]
            assert len(owners) == 1, (choice, [f.name for f in owners])
            owners[0].parse(choice)  # well formed
            if key in table.fallbacks:  # a baseline, where the choice is one of our kernels
                assert owners[0].ours and not families.family_of(table.fallbacks[key]).ours


def test_no_choice_name_is_matched_by_its_prefix_outside_the_families() -> None:
    """The dispatcher, the tuner, the benchmark and the choices' front door ask families.py; no
    string there (docstrings aside) starts like a family's choice names."""
    prefixes = ("triton_", "mma_", "cutlass_", "cublaslt:", "file:", "toy_")
    folder = Path(families.__file__).parent
    for module in ("dispatch.py", "tune.py", "bench.py", "choices.py"):
        tree = ast.parse((folder / module).read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                      and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        found = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and id(n) not in docstrings and n.value.startswith(prefixes)]
        assert not found, (module, found)
