"""The CUDA C++ mma.sync GEMM family (gemm/cuda_mma.py, gemm/kernels/mma_gemm.cu).

On the CPU: every config of the search space compiles with nvcc for sm_90a, compiler errors reach
the caller, the shared-memory and register budgets hold, and shapes and operands are refused with a
reason. On a GPU: results against a float64 reference, edge tiles included, on a side stream and
inside CUDA graph capture.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from warpforge.errors import UsageError
from warpforge.gemm import GemmShape, cuda_mma
from warpforge.gemm.cuda_mma import MmaConfig

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")

DTYPES = ("float16", "bfloat16")
LAYOUTS = ("nn", "nt")


# ---------------------------------------------------------------- CPU: compile, budgets, refusals


@pytest.mark.slow
@needs_nvcc
def test_every_config_compiles_for_sm90a() -> None:
    # all configs x both dtypes x both layouts (96 nvcc runs): ~35 s wall on 2 cores, ~0.4-1.5 s each
    jobs = list(itertools.product(cuda_mma.configs(), DTYPES, LAYOUTS))

    def build(job: tuple[MmaConfig, str, str]) -> str | None:
        try:
            cuda_mma.compile_check(*job)
        except UsageError as exc:
            return str(exc)
        return None

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        failures = [err for err in pool.map(build, jobs) if err]
    assert not failures, "\n\n".join(failures[:3])
    print(f"{len(jobs)} nvcc compiles in {time.perf_counter() - started:.1f} s")


@needs_nvcc
def test_a_broken_config_fails_with_the_compilers_message() -> None:
    bad_bk = MmaConfig(128, 128, 48, 2, 2, 3)  # built directly: from_dict would refuse it first
    with pytest.raises(UsageError, match="BK must be 32 or 64") as info:
        cuda_mma.compile_check(bad_bk, "float16", "nn")
    assert "mma_128x128x48_w2x2_s3" in str(info.value) and "error" in str(info.value)


@needs_nvcc
def test_an_unknown_dtype_macro_fails_with_the_compilers_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cuda_mma.CUDA_TYPES, "float32", "float")  # compile_options would refuse float32 otherwise
    with pytest.raises(UsageError, match="DTYPE must be half or __nv_bfloat16"):
        cuda_mma.compile_check(cuda_mma.configs()[0], "float32", "nt")


def test_missing_nvcc_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    with pytest.raises(UsageError, match="nvcc not found: install the CUDA toolkit or set CUDA_HOME"):
        cuda_mma.compile_check(cuda_mma.configs()[0], "float16", "nn")


def test_configs_fit_the_h100_budgets() -> None:
    configs = cuda_mma.configs()
    assert 12 <= len(configs) <= 30 and len({c.name for c in configs}) == len(configs)
    for c in configs:
        assert c.problem is None, c.name
        # per stage a BM x BK tile of A and a BN x BK tile of B, 2 bytes an element; 227 KB is H100's
        # opt-in maximum per block (CUDA C++ Programming Guide, compute capability 9.0)
        smem = c.stages * (c.bm * c.bk + c.bn * c.bk) * 2
        assert c.smem_bytes == smem <= 227 * 1024, c.name
        assert c.registers <= min(255, 65536 // c.threads), c.name
        assert c.bm % (16 * c.warps_m) == 0 and c.bn % (16 * c.warps_n) == 0, c.name
    # the space spans what the brief asks of it
    assert {c.bk for c in configs} == {32, 64} and {c.stages for c in configs} == {2, 3, 4}
    assert {64, 128, 256} <= {c.bm for c in configs} and {64, 128, 256} <= {c.bn for c in configs}
    assert {c.threads for c in configs} == {128, 256}
    assert any(c.smem_bytes > 48 * 1024 for c in configs)  # the dynamic shared memory opt-in is exercised


def test_config_names_and_dicts_round_trip() -> None:
    for c in cuda_mma.configs():
        assert MmaConfig.from_name(c.name) == c == MmaConfig.from_dict(c.to_dict())
    assert MmaConfig(128, 128, 32, 2, 2, 3).name == "mma_128x128x32_w2x2_s3"
    with pytest.raises(UsageError, match="bk must be 32 or 64"):
        MmaConfig.from_name("mma_128x128x48_w2x2_s3")
    with pytest.raises(UsageError, match="would spill"):
        MmaConfig.from_name("mma_128x128x64_w2x2_s3")  # 64 x 64 warp tiles spill at bk 64 (ptxas -v)
    with pytest.raises(UsageError, match="not an MMA config name"):
        MmaConfig.from_name("triton_tiled:BM16")
    with pytest.raises(UsageError, match="integer"):
        MmaConfig.from_dict({"bm": 128})


def test_applicable_needs_16_byte_rows() -> None:
    cfg = cuda_mma.configs()[0]
    assert cuda_mma.applicable(GemmShape(1, 72, 72), "nn", cfg)
    assert cuda_mma.applicable(GemmShape(17, 50257, 768), "nt", cfg)  # N is free when B is (N, K)
    assert not cuda_mma.applicable(GemmShape(17, 50257, 768), "nn", cfg)
    for k in (1, 100, 1001):
        for layout in LAYOUTS:
            assert not cuda_mma.applicable(GemmShape(64, 64, k, "bfloat16"), layout, cfg)
    assert "K=100 is not a multiple of 8" in str(cuda_mma.why_not(GemmShape(64, 64, 100), "nt", cfg))
    assert "layout" in str(cuda_mma.why_not(GemmShape(64, 64, 64), "tn", cfg))


def test_compile_options_carry_the_config() -> None:
    cfg = MmaConfig(64, 128, 64, 2, 2, 3)
    opts = cuda_mma.compile_options(cfg, "bfloat16", "nt")
    for flag in ("-DBM=64", "-DBN=128", "-DBK=64", "-DWARPS_M=2", "-DWARPS_N=2", "-DSTAGES=3",
                 "-DDTYPE=__nv_bfloat16", "-DB_KMAJOR=1", "--gpu-architecture=sm_90a"):
        assert flag in opts
    assert "-DB_KMAJOR=0" in cuda_mma.compile_options(cfg, "float16", "nn", arch=None)
    assert not any(o.startswith("--gpu-architecture") for o in cuda_mma.compile_options(cfg, "float16", "nn", None))
    with pytest.raises(UsageError):
        cuda_mma.compile_options(cfg, "float32", "nn")
    assert 'extern "C" __global__' in cuda_mma.source()


def test_launch_refuses_bad_operands_before_touching_a_gpu() -> None:
    cfg = cuda_mma.configs()[0]
    a, b = torch.zeros(16, 64, dtype=torch.float16), torch.zeros(64, 32, dtype=torch.float16)
    with pytest.raises(UsageError, match="CUDA tensor"):
        cuda_mma.launch(a, b, torch.empty(16, 32, dtype=torch.float16), cfg, "nn")
    with pytest.raises(UsageError, match="layout"):
        cuda_mma.matmul(a, b, cfg, "tn")


def test_missing_cupy_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy now raises ImportError
    with pytest.raises(UsageError, match=r"pip install 'warpforge\[nvrtc\]'"):
        cuda_mma._cupy()


# ---------------------------------------------------------------- GPU: results, streams, graphs

# M = 1, 17, 200 leave partial block rows; N = 72, 136 and K = 72, 1000 partial tiles; 77 (nt only)
# an odd N, stored element by element
SHAPES = [(1, 136, 72), (17, 72, 1000), (200, 136, 72), (200, 72, 1000), (512, 512, 512), (33, 77, 136)]
GPU_CONFIGS = ["mma_64x64x32_w2x2_s2", "mma_128x128x32_w2x2_s3", "mma_128x256x32_w2x4_s4",
               "mma_128x128x64_w2x4_s4", "mma_32x128x64_w1x4_s4", "mma_256x64x32_w4x1_s3"]
TOL = 1e-3


def _operands(m: int, n: int, k: int, dtype: str, layout: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dt = getattr(torch, dtype)
    a = torch.randn(m, k, device="cuda", generator=gen).to(dt)
    b = torch.randn(*((k, n) if layout == "nn" else (n, k)), device="cuda", generator=gen).to(dt)
    return a, b


def _error(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, layout: str) -> float:
    """Relative L2 error against the float64 product rounded once to the output dtype, which is what
    an exact kernel returns (bf16's own rounding of the output alone is ~2e-3 relative)."""
    exact = a.double() @ (b if layout == "nn" else b.t()).double()
    expected = exact.to(out.dtype).double()
    return ((out.double() - expected).norm() / expected.norm()).item()


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_CONFIGS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_float64_on_edge_tiles(dtype: str, layout: str, name: str) -> None:
    cfg = MmaConfig.from_name(name)
    for m, n, k in SHAPES:
        if not cuda_mma.applicable(GemmShape(m, n, k, dtype), layout, cfg):
            assert layout == "nn" and n % 8
            continue
        a, b = _operands(m, n, k, dtype, layout)
        out = cuda_mma.matmul(a, b, cfg, layout)
        assert out.shape == (m, n) and out.dtype == a.dtype
        assert _error(out, a, b, layout) < TOL, (m, n, k)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", cuda_mma.configs(), ids=lambda c: c.name)
def test_every_config_is_correct_on_a_ragged_shape(cfg: MmaConfig) -> None:
    for dtype, layout in (("float16", "nn"), ("bfloat16", "nt")):
        a, b = _operands(200, 136, 1000, dtype, layout, seed=1)
        assert _error(cuda_mma.matmul(a, b, cfg, layout), a, b, layout) < TOL, (dtype, layout)


@pytest.mark.gpu
def test_launch_runs_on_the_current_torch_stream() -> None:
    cfg = MmaConfig.from_name("mma_128x128x32_w2x2_s3")
    a_src, b_src = _operands(512, 512, 512, "float16", "nn")
    cuda_mma.matmul(a_src, b_src, cfg)  # compile first
    a, b = torch.zeros_like(a_src), torch.zeros_like(b_src)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        # the side stream is busy for a while before it fills a and b: a kernel launched on any
        # other stream would read the zeros
        torch.cuda._sleep(100_000_000)
        a.copy_(a_src)
        b.copy_(b_src)
        out = cuda_mma.matmul(a, b, cfg)
    torch.cuda.current_stream().wait_stream(side)
    assert _error(out, a_src, b_src, "nn") < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_launch_works_inside_cuda_graph_capture(layout: str) -> None:
    cfg = MmaConfig.from_name("mma_128x256x32_w2x4_s4")  # 96 KB: dynamic shared memory opt-in
    a, b = _operands(200, 136, 1000, "bfloat16", layout)
    out = torch.empty(200, 136, dtype=a.dtype, device="cuda")
    cuda_mma.launch(a, b, out, cfg, layout)  # compile and load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cuda_mma.launch(a, b, out, cfg, layout)
    a2, b2 = _operands(200, 136, 1000, "bfloat16", layout, seed=7)
    a.copy_(a2)
    b.copy_(b2)
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert _error(out, a2, b2, layout) < TOL


@pytest.mark.gpu
def test_launch_refuses_unaligned_and_strided_operands() -> None:
    cfg = cuda_mma.configs()[0]
    a, b = _operands(64, 64, 64, "float16", "nn")
    with pytest.raises(UsageError, match="contiguous"):
        cuda_mma.matmul(a, b.t(), cfg, "nn")
    with pytest.raises(UsageError, match="16-byte aligned"):
        cuda_mma.matmul(a.flatten()[1 : 1 + 64 * 56].view(64, 56), b[:56], cfg, "nn")  # 2 bytes off
    with pytest.raises(UsageError, match="float16 or bfloat16"):
        cuda_mma.matmul(a.float(), b.float(), cfg, "nn")
    with pytest.raises(UsageError, match="does not fit"):
        cuda_mma.matmul(a, b[:32], cfg, "nn")
