"""The GEMM track on a CUDA GPU: every Triton family and dtype, cuBLASLt through nvmath, and the
dispatcher on side streams, in CUDA graphs and under torch.compile. Skipped without CUDA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from warpforge.gemm import choices, cublaslt, dispatch
from warpforge.gemm.shapes import GemmShape

pytestmark = pytest.mark.gpu

SHAPES = [GemmShape(1, 4096, 4096), GemmShape(37, 72, 1000), GemmShape(200, 136, 72), GemmShape(512, 512, 512),
          GemmShape(256, 256, 16384), GemmShape(1000, 1000, 1004)]


def _check(shape: GemmShape, layout: str, name: str) -> float:
    a, b = choices.make_inputs(shape, layout, "cuda", 0)
    fn = choices.make_choice(name, layout, a, b)
    return choices.rel_error(fn(a, b), choices.reference(a, b, layout))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_every_triton_candidate_is_correct(dtype: str, layout: str) -> None:
    from warpforge.gemm import triton_gemm

    failures = []
    for base in SHAPES:
        shape = GemmShape(base.M, base.N, base.K, dtype)
        for cfg in triton_gemm.candidate_configs(shape, layout, triton_gemm.num_sms(torch.device("cuda")))[:6]:
            err = _check(shape, layout, cfg.name)
            if not err < choices.tolerance(dtype):
                failures.append((shape.M, shape.N, shape.K, cfg.name, err))
    assert not failures


@pytest.mark.parametrize("family", ["splitk", "streamk"])
def test_split_reductions_are_deterministic(family: str) -> None:
    from warpforge.gemm.triton_gemm import TritonConfig, matmul

    cfg = TritonConfig(family, 64, 64, 64, 3, 4, 8, 8 if family == "splitk" else 1)
    a, b = choices.make_inputs(GemmShape(256, 256, 16384), "nn", "cuda", 0)
    first = matmul(a, b, cfg)
    assert all(torch.equal(first, matmul(a, b, cfg)) for _ in range(20))


def test_cublaslt_algorithms_are_all_correct() -> None:
    shape = GemmShape(128, 4096, 4096)
    a, b = choices.make_inputs(shape, "nt", "cuda", 0)
    lt = cublaslt.CublasLt.for_problem(a, b, "nt")
    assert lt.algorithms
    for i in range(len(lt.algorithms)):
        assert choices.rel_error(lt.call(i)(a, b), choices.reference(a, b, "nt")) < 1e-3


def test_cublaslt_reconfigurations_are_checked_sized_and_correct() -> None:
    # long K, small M x N: where splitting K pays, if any algorithm of this cuBLASLt allows it
    shape = GemmShape(64, 256, 16384)
    a, b = choices.make_inputs(shape, "nn", "cuda", 0)
    lt = cublaslt.CublasLt.for_problem(a, b, "nn")
    import dataclasses

    fields = {f.name for f in dataclasses.fields(lt.algorithms[0].capabilities)}
    assert {"splitk_support", "reduction_scheme_mask", "cta_swizzling_support"} <= fields, fields  # the names we read
    variants = [n for n in lt.names(len(lt.algorithms)) if "/" in n]
    if not variants:
        pytest.skip(f"no algorithm cuBLASLt offers for {shape} can split K or swizzle: "
                    f"{[str(alg.capabilities) for alg in lt.algorithms][:1]}")
    originals = [lt.describe(i) for i in range(len(lt.algorithms))]
    built = 0
    for name in variants:
        try:
            fn = lt.call(name)
        except Exception as exc:  # cublasLtMatmulAlgoCheck may refuse a configuration, or we its workspace
            assert "NOT_SUPPORTED" in str(exc) or "not supported" in str(exc).lower() or "workspace" in str(exc), (name, exc)
            continue
        built += 1
        assert choices.rel_error(fn(a, b), choices.reference(a, b, "nn")) < 1e-3, name
        info = lt.describe(name)
        _, settings = cublaslt.parse_cublaslt(name)
        for key, value in settings.items():
            assert int(info[key]) == value, (name, info)  # the copy carries the change ...
    assert built, variants
    assert [lt.describe(i) for i in range(len(lt.algorithms))] == originals  # ... the heuristic's own are as they were
    assert choices.rel_error(lt.call(0)(a, b), choices.reference(a, b, "nn")) < 1e-3


def test_padded_choice_on_unaligned_shape() -> None:
    assert _check(GemmShape(1000, 1000, 1004), "nn", "torch_padded") < 1e-3
    assert _check(GemmShape(64, 50257, 768), "nt", "torch_padded") < 1e-3


@pytest.fixture
def triton_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    gpu = torch.cuda.get_device_name(0)
    name = "triton_splitk:BM16-BN64-BK128-S4-W4-G8-K8"
    entries = [{"M": 16, "N": 4096, "K": 4096, "dtype": "float16", "layout": "nt", "choice": name}]
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"gpu": gpu, "entries": entries}))
    monkeypatch.setenv("WARPFORGE_GEMM_TABLE", str(path))
    dispatch.reset()
    yield name
    dispatch.reset()


def test_dispatcher_runs_the_table_choice_on_side_streams_and_in_graphs(triton_table: str) -> None:
    x = torch.randn(16, 4096, device="cuda", dtype=torch.float16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    assert dispatch.choose(x, w.t()) == (triton_table, "measured")
    ref = choices.reference(x, w, "nt")
    assert choices.rel_error(dispatch.matmul(x, w.t()), ref) < 1e-3
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = dispatch.matmul(x, w.t())
    torch.cuda.current_stream().wait_stream(side)
    assert choices.rel_error(out, ref) < 1e-3
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        dispatch.matmul(static_x, w.t())  # warm-up (compiles) outside the capture
        with torch.cuda.graph(graph):
            static_out = dispatch.matmul(static_x, w.t())
    for _ in range(3):
        static_x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert choices.rel_error(static_out, choices.reference(static_x, w, "nt")) < 1e-3


def test_custom_op_under_torch_compile(triton_table: str) -> None:
    x = torch.randn(16, 4096, device="cuda", dtype=torch.float16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)

    @torch.compile(fullgraph=True)
    def layer(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.ops.warpforge.matmul(x, w.t()))

    assert choices.rel_error(layer(x), torch.relu(choices.reference(x, w, "nt"))) < 1e-3


def test_online_tuning_serves_an_unmeasured_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """WARPFORGE_GEMM_ONLINE=1 on the GPU: an unmeasured shape is tuned on its first call (torch and
    cuBLASLt), its record written, and the result is right; inside a CUDA graph capture nothing is
    tuned and torch.matmul runs."""
    pytest.importorskip("nvmath")
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path))
    monkeypatch.setenv("WARPFORGE_GEMM_TABLE", str(tmp_path / "empty.json"))
    (tmp_path / "empty.json").write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "entries": []}))
    monkeypatch.setenv(dispatch.ONLINE, "1")
    dispatch.reset()
    try:
        a = torch.randn(384, 1152, device="cuda", dtype=torch.float16)
        w = torch.randn(768, 1152, device="cuda", dtype=torch.float16)
        choice, how = dispatch.choose(a, w.t())
        assert how == "online" and (choice == "torch" or choice.startswith("cublaslt:"))
        records = [json.loads(line) for line in dispatch.online_records(torch.cuda.get_device_name()).read_text().splitlines()]
        assert [(r["M"], r["N"], r["K"], r["layout"], r["choice"]) for r in records] == [(384, 768, 1152, "nt", choice)]
        out = dispatch.matmul(a, w.t())
        assert choices.rel_error(out, a.double() @ w.double().t()) < choices.tolerance("float16")
        g = torch.cuda.CUDAGraph()
        x = torch.randn(320, 1152, device="cuda", dtype=torch.float16)
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            y = dispatch.matmul(x, w.t())
        g.replay()
        torch.cuda.synchronize()
        assert choices.rel_error(y, x.double() @ w.double().t()) < choices.tolerance("float16")
        assert len(dispatch.online_records(torch.cuda.get_device_name()).read_text().splitlines()) == 1
    finally:
        dispatch.reset()


def test_online_tuning_times_the_nearest_shapes_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unmeasured shape whose nearest measured one chose a Triton kernel: without online tuning the
    kernel is handed on; with it, the kernel is screened on the shape beside torch.matmul and cuBLASLt,
    and what wins computes the right product."""
    pytest.importorskip("nvmath")
    from warpforge.gemm import triton_gemm

    shape = GemmShape(384, 768, 1152)
    name = triton_gemm.candidate_configs(shape, "nt", triton_gemm.num_sms(torch.device("cuda")))[0].name
    gpu = torch.cuda.get_device_name()
    (tmp_path / "t.json").write_text(json.dumps({"gpu": gpu, "entries": [
        {"M": 512, "N": 768, "K": 1024, "dtype": "float16", "layout": "nt", "choice": name}]}))
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path))
    monkeypatch.setenv("WARPFORGE_GEMM_TABLE", str(tmp_path / "t.json"))
    monkeypatch.delenv(dispatch.ONLINE, raising=False)
    a = torch.randn(384, 1152, device="cuda", dtype=torch.float16)
    w = torch.randn(768, 1152, device="cuda", dtype=torch.float16)
    dispatch.reset()
    try:
        assert dispatch.choose(a, w.t()) == (name, "nearest")
        monkeypatch.setenv(dispatch.ONLINE, "1")
        dispatch.reset()
        choice, how = dispatch.choose(a, w.t())
        record = json.loads(dispatch.online_records(gpu).read_text().splitlines()[0])
        screened = {c["name"]: c.get("status") for c in record["candidates"]}
        assert how == "online" and screened.get(name) == "ok" and record["choice"] == choice
        assert choice in (name, "torch") or choice.startswith("cublaslt:")
        out = dispatch.matmul(a, w.t())
        assert choices.rel_error(out, a.double() @ w.double().t()) < choices.tolerance("float16")
    finally:
        dispatch.reset()
