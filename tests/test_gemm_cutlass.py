"""The CUTLASS sm90 GEMM family (gemm/cutlass_sm90.py, gemm/kernels/cutlass_sm90.cu).

On the CPU: the configuration space and its names, the shapes refused and why, the CUDA source of
each instance, the build's file names, cache and carried-library lookup, compiler and missing-header
errors; in the slow lane one real nvcc build for sm_90a, loaded with ctypes and asked which shapes
it takes. On a Hopper GPU: results against torch's fp32 product, ragged M, both layouts and dtypes,
stream-K, a side stream and CUDA graph capture.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from warpforge.errors import UsageError
from warpforge.gemm import GemmShape, choices, cutlass_build, cutlass_sm90, dispatch, families, tune
from warpforge.gemm.cutlass_sm90 import CutlassConfig
from warpforge.gemm.family import Problem

C = CutlassConfig.from_name
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")
needs_headers = pytest.mark.skipif(importlib.util.find_spec("cutlass_library") is None and
                                   not os.environ.get("WARPFORGE_CUTLASS_INCLUDE"),
                                   reason="needs the CUTLASS headers (pip install nvidia-cutlass)")


@pytest.fixture
def headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in CUTLASS include folder (version 9.8.7), so file names do not depend on what is installed."""
    (tmp_path / "inc" / "cutlass").mkdir(parents=True)
    (tmp_path / "inc" / "cute").mkdir()
    (tmp_path / "inc" / "cutlass" / "cutlass.h").write_text("")
    (tmp_path / "inc" / "cute" / "tensor.hpp").write_text("")
    (tmp_path / "inc" / "cutlass" / "version.h").write_text(
        "#define CUTLASS_MAJOR 9\n#define CUTLASS_MINOR 8\n#define CUTLASS_PATCH 7\n")
    monkeypatch.setenv("WARPFORGE_CUTLASS_INCLUDE", str(tmp_path / "inc"))
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("WARPFORGE_CUTLASS_LIB_DIR", raising=False)
    return tmp_path / "inc"


# ---------------------------------------------------------------- CPU: the configuration space


def test_configs_are_valid_unique_and_span_the_schedules() -> None:
    configs = cutlass_sm90.configs()
    assert 16 <= len(configs) <= 32 and len({c.name for c in configs}) == len(configs)
    assert all(c.problem is None for c in configs)
    assert {c.schedule for c in configs} == {"coop", "pingpong", "streamk"}
    assert {(c.cluster_m, c.cluster_n) for c in configs} == {(1, 1), (2, 1), (1, 2)}
    assert {c.tile_k for c in configs} == {64}  # 64 halves: one 128-byte swizzled row per stage
    assert all(c.tile_m >= 128 for c in configs if c.schedule in ("coop", "streamk"))
    assert {(c.tile_m, c.tile_n) for c in configs if c.schedule == "pingpong"} == {(64, 128), (64, 256), (128, 128)}
    assert all(c.accumulators <= 128 for c in configs)


def test_names_round_trip_and_bad_names_are_refused() -> None:
    for c in cutlass_sm90.configs():
        assert C(c.name) == c
    assert CutlassConfig(128, 256, 64, 2, 1, "coop").name == "cutlass_128x256x64_c2x1_coop"
    with pytest.raises(UsageError, match="two warp groups"):
        C("cutlass_64x128x64_c1x1_coop")  # cooperative splits tile M between two warp groups
    with pytest.raises(UsageError, match="would spill"):
        C("cutlass_256x256x64_c1x1_pingpong")  # 512 accumulators per thread
    with pytest.raises(UsageError, match="schedule must be"):
        C("cutlass_128x128x64_c1x1_warpspecialized")
    with pytest.raises(UsageError, match="cluster dims"):
        C("cutlass_128x128x64_c4x1_coop")
    with pytest.raises(UsageError, match="not a CUTLASS config name"):
        C("mma_128x128x32_w2x2_s3")


def test_why_not_refuses_what_tma_cannot_load_or_store() -> None:
    cfg = C("cutlass_128x128x64_c1x1_coop")
    assert cutlass_sm90.applicable(GemmShape(1000, 1024, 4096), "nn", cfg)  # M is never contiguous: free
    assert cutlass_sm90.applicable(GemmShape(1, 8, 8, "bfloat16"), "nt", cfg)
    assert "K=100 is not a multiple of 8" in str(cutlass_sm90.why_not(GemmShape(64, 64, 100), "nt", cfg))
    # N: rows of B for nn, and in both layouts rows of the output, which the epilogue stores by TMA
    assert "of B and of the output" in str(cutlass_sm90.why_not(GemmShape(17, 50257, 768), "nn", cfg))
    assert "of the output" in str(cutlass_sm90.why_not(GemmShape(17, 50257, 768), "nt", cfg))
    assert "layout" in str(cutlass_sm90.why_not(GemmShape(64, 64, 64), "tn", cfg))
    assert "two warp groups" in str(cutlass_sm90.why_not(GemmShape(64, 64, 64), "nn", CutlassConfig(64, 64, 64, 1, 1, "coop")))


def test_candidate_configs_follow_the_shape() -> None:
    small = cutlass_sm90.candidate_configs(GemmShape(64, 128, 4096), "nt")
    assert small and all(c.tile_m == 64 and c.tile_n == 128 for c in small)  # tiles no larger than the problem
    big = cutlass_sm90.candidate_configs(GemmShape(8192, 8192, 8192), "nn")
    assert "streamk" not in {c.schedule for c in big} and len(big) == 18  # 4096 tiles fill 132 SMs
    few_tiles = cutlass_sm90.candidate_configs(GemmShape(512, 1024, 16384), "nn")  # 32 tiles of 128 x 128
    assert {c.name for c in few_tiles if c.schedule == "streamk"} == {"cutlass_128x128x64_c1x1_streamk",
                                                                      "cutlass_128x256x64_c1x1_streamk"}
    assert cutlass_sm90.candidate_configs(GemmShape(512, 50257, 768), "nt") == []  # unaligned N


# ---------------------------------------------------------------- CPU: source and build


@pytest.mark.parametrize("name,dtype,layout,expected", [
    ("cutlass_128x256x64_c2x1_coop", "float16", "nn",
     ["using Element = cutlass::half_t;", "#define WF_B_KMAJOR 0", "Shape<_128, _256, _64>", "Shape<_2, _1, _1>",
      "cutlass::gemm::KernelTmaWarpSpecializedCooperative;", "cutlass::epilogue::TmaWarpSpecializedCooperative;",
      "cutlass::gemm::PersistentScheduler;"]),
    ("cutlass_64x128x64_c1x2_pingpong", "bfloat16", "nt",
     ["using Element = cutlass::bfloat16_t;", "#define WF_B_KMAJOR 1", "Shape<_64, _128, _64>", "Shape<_1, _2, _1>",
      "cutlass::gemm::KernelTmaWarpSpecializedPingpong;", "cutlass::epilogue::TmaWarpSpecialized;"]),
    ("cutlass_128x128x64_c1x1_streamk", "float16", "nt",
     ["cutlass::gemm::StreamKScheduler;", "cutlass::gemm::KernelTmaWarpSpecializedCooperative;"]),
])
def test_source_carries_the_config(name: str, dtype: str, layout: str, expected: list[str]) -> None:
    text = cutlass_build.source(C(name), dtype, layout)
    for line in expected:
        assert line in text, line
    assert "$" not in text  # every placeholder filled
    # WF_B_KMAJOR (above) picks B's layout: CUTLASS ColumnMajor (K-major) exactly for our (N, K) weight
    assert "#if WF_B_KMAJOR\nusing LayoutB = cutlass::layout::ColumnMajor;" in text
    assert "using LayoutA = cutlass::layout::RowMajor;" in text and "using LayoutD = cutlass::layout::RowMajor;" in text
    assert f'"{name}/{dtype}/{layout}"' in text
    for entry in ("int wf_cutlass_gemm(", "size_t wf_cutlass_workspace_size(", "int wf_cutlass_can_implement("):
        assert entry in text
    with pytest.raises(UsageError):
        cutlass_build.source(C(name), "float32", layout)


def test_missing_headers_say_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WARPFORGE_CUTLASS_INCLUDE", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UsageError, match=r"CUTLASS headers not found: pip install 'warpforge\[gemm\]'"):
        cutlass_build.include_dir()
    monkeypatch.setenv("WARPFORGE_CUTLASS_INCLUDE", str(tmp_path))
    with pytest.raises(UsageError, match="WARPFORGE_CUTLASS_INCLUDE=.* holds no cutlass/cutlass.h"):
        cutlass_build.include_dir()


def test_the_wheels_headers_are_found_without_importing_it() -> None:
    if importlib.util.find_spec("cutlass_library") is None:
        pytest.skip("nvidia-cutlass is not installed")
    if os.environ.get("WARPFORGE_CUTLASS_INCLUDE"):
        pytest.skip("WARPFORGE_CUTLASS_INCLUDE overrides the wheel")
    folder = cutlass_build.include_dir()
    assert (folder / "cute" / "tensor.hpp").is_file() and folder.parts[-2:] == ("source", "include")
    assert cutlass_build.header_version().count(".") == 2


def test_library_names_follow_source_flags_and_headers(headers: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = C("cutlass_128x128x64_c1x1_coop")
    name = cutlass_build.library_name(cfg, "float16", "nt")
    assert name.startswith("cutlass_128x128x64_c1x1_coop_float16_nt-") and name.endswith("-cutlass9.8.7.so")
    assert cutlass_build.library_name(cfg, "float16", "nn") != name
    monkeypatch.setattr(cutlass_build, "NVCC_FLAGS", (*cutlass_build.NVCC_FLAGS, "-G"))
    assert cutlass_build.library_name(cfg, "float16", "nt") != name  # a new flag is a new library


def test_built_libraries_are_found_in_the_carried_folder_then_the_cache(headers: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = C("cutlass_64x128x64_c2x1_pingpong")
    name = cutlass_build.library_name(cfg, "bfloat16", "nn")
    assert cutlass_build.find_built(cfg, "bfloat16", "nn") is None
    cached = cutlass_build.cache_dir() / name
    assert cached.parent == tmp_path / "cache" / "gemm" / "cutlass"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"")
    assert cutlass_build.find_built(cfg, "bfloat16", "nn") == cached
    carried = tmp_path / "carried"
    carried.mkdir()
    (carried / name).write_bytes(b"")
    monkeypatch.setenv("WARPFORGE_CUTLASS_LIB_DIR", str(carried))
    assert cutlass_build.find_built(cfg, "bfloat16", "nn") == carried / name
    assert cutlass_build.build(cfg, "bfloat16", "nn") == carried / name  # nothing to build
    # a GPU machine with no headers takes a carried library of any CUTLASS version, same source and flags
    monkeypatch.setenv("WARPFORGE_CUTLASS_INCLUDE", str(tmp_path / "nowhere"))
    other = carried / name.replace("-cutlass9.8.7.so", "-cutlass9.9.0.so")
    other.write_bytes(b"")
    os.utime(other, (time.time() + 10, time.time() + 10))
    assert cutlass_build.find_built(cfg, "bfloat16", "nn") == other
    assert cutlass_build.build(cfg, "bfloat16", "nn") == other  # used, not rebuilt (2026-11-27: this raised)
    monkeypatch.delenv("WARPFORGE_CUTLASS_LIB_DIR")
    cached.unlink()
    with pytest.raises(UsageError, match="holds no cutlass/cutlass.h"):  # nothing carried, nothing to build with
        cutlass_build.build(cfg, "bfloat16", "nn")


def _fake_nvcc(tmp_path: Path, script: str) -> str:
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\n" + script)
    nvcc.chmod(0o755)
    return str(nvcc)


def test_a_failed_build_is_a_value_and_is_not_retried(headers: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "calls"
    nvcc = _fake_nvcc(tmp_path, f"echo x >> {calls}\n"
                                "echo 'instance.cu(80): error: static assertion failed with Cooperative kernel' >&2\n"
                                "exit 2\n")
    monkeypatch.setattr(cutlass_build, "_nvcc", lambda: nvcc)
    monkeypatch.setattr(cutlass_build, "_failed", {})
    cfg = C("cutlass_128x128x64_c1x2_coop")
    built = cutlass_build.build_all([(cfg, "float16", "nn"), (cfg, "float16", "nn")], jobs=2)
    assert len(built) == 1 and built[0].path is None  # duplicates built once
    assert "cutlass_128x128x64_c1x2_coop (float16, nn, sm_90a) does not compile" in str(built[0].error)
    assert "static assertion failed" in str(built[0].error)
    with pytest.raises(UsageError, match="does not compile"):
        cutlass_build.build(cfg, "float16", "nn")
    assert calls.read_text().count("x") == 1  # remembered, not compiled again
    assert not list(cutlass_build.cache_dir().glob("*"))  # no half-written library left behind
    with pytest.raises(UsageError, match="does not compile"):
        cutlass_build.compile_check(cfg, "float16", "nn")


def test_a_build_writes_the_library_under_its_name(headers: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = tmp_path / "args"
    # a stand-in nvcc that records its arguments and writes the -o file
    nvcc = _fake_nvcc(tmp_path, f'echo "$@" > {args}\nwhile [ "$1" != "-o" ]; do shift; done\necho lib > "$2"\n')
    monkeypatch.setattr(cutlass_build, "_nvcc", lambda: nvcc)
    cfg = C("cutlass_128x256x64_c1x1_streamk")
    [built] = cutlass_build.build_all([(cfg, "float16", "nt")], out_dir=tmp_path / "carry")
    assert built.error is None and built.path == tmp_path / "carry" / cutlass_build.library_name(cfg, "float16", "nt")
    assert built.path.read_text() == "lib\n"
    flags = args.read_text().split()
    for flag in ("-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr", "-std=c++17", "-shared",
                 "-DNDEBUG", f"-I{headers}"):
        assert flag in flags


def test_missing_nvcc_says_what_to_install(headers: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    with pytest.raises(UsageError, match="nvcc not found: install the CUDA toolkit or set CUDA_HOME"):
        cutlass_build.compile_check(cutlass_sm90.configs()[0], "float16", "nn")


def test_launch_refuses_bad_operands_before_touching_a_gpu() -> None:
    cfg = cutlass_sm90.configs()[0]
    a, b = torch.zeros(16, 64, dtype=torch.float16), torch.zeros(64, 32, dtype=torch.float16)
    with pytest.raises(UsageError, match="CUDA tensor"):
        cutlass_sm90.launch(a, b, torch.empty(16, 32, dtype=torch.float16), cfg, "nn")
    with pytest.raises(UsageError, match="layout"):
        cutlass_sm90.matmul(a, b, cfg, "tn")


def test_raster_and_swizzle_variants_parse_and_are_offered_where_tiles_fill_a_wave() -> None:
    cfg = C("cutlass_128x128x64_c1x2_pingpong")
    assert cutlass_sm90.parse_choice(cfg.name) == (cfg, "h", 1, 1)
    assert cutlass_sm90.parse_choice(f"{cfg.name}/n4") == (cfg, "n", 4, 1)
    for bad in (f"{cfg.name}/x4", f"{cfg.name}/n3", f"{cfg.name}/n", f"{cfg.name}/"):
        with pytest.raises(UsageError, match="raster"):
            cutlass_sm90.parse_choice(bad)
    # 8192 x 8192 in 128 x 128 tiles: 4096 tiles, many waves; 1024 x 1024: 64 tiles, under one wave of 132 SMs
    big = cutlass_sm90.variant_names(cfg, GemmShape(8192, 8192, 512), 132)
    assert len(big) == 8 and {n.split("/")[1] for n in big} == {f"{r}{w}" for r in "mn" for w in (1, 2, 4, 8)}
    assert all(cutlass_sm90.parse_choice(n)[0] == cfg for n in big)
    assert cutlass_sm90.variant_names(cfg, GemmShape(1024, 1024, 4096), 132) == []
    # the tuner takes the fastest screened configurations' variants (never a variant's variants)
    screened = {"cutlass_128x128x64_c1x2_pingpong": {"ms": 1.0}, "cutlass_128x256x64_c2x1_coop": {"ms": 2.0},
                "cutlass_64x128x64_c1x1_pingpong": {"ms": 3.0}, "cutlass_128x128x64_c1x2_pingpong/n4": {"ms": 0.5},
                "triton_tile:x": {"ms": 0.1}}
    cpu = tune.TuneSettings(families=("cutlass",), cutlass_variants=2)
    picked = tune.variants(screened, Problem(GemmShape(8192, 8192, 512), "nn", "cpu"), cpu)
    assert {cutlass_sm90.parse_choice(n)[0].name for n in picked} == {"cutlass_128x128x64_c1x2_pingpong",
                                                                      "cutlass_128x256x64_c2x1_coop"}
    assert tune.variants(screened, Problem(GemmShape(8192, 8192, 512), "nn", "cpu"),
                         tune.TuneSettings(cutlass_variants=0)) == []
    with pytest.raises(UsageError, match="raster"):
        cutlass_sm90.launch(torch.zeros(8, 8, dtype=torch.float16), torch.zeros(8, 8, dtype=torch.float16),
                            torch.zeros(8, 8, dtype=torch.float16), cfg, "nn", "x", 1)


def test_split_k_variants_are_for_stream_k_configurations_on_few_tiles_and_long_k() -> None:
    """`/k<splits>` forces the stream-K scheduler's split-K decomposition: offered for a stream-K
    configuration where the tiles cannot fill the GPU, each slice keeping MIN_K_PER_SPLIT of K;
    refused on a persistent configuration (its scheduler has no split-K)."""
    sk, coop = C("cutlass_128x128x64_c1x1_streamk"), C("cutlass_128x128x64_c1x1_coop")
    assert cutlass_sm90.parse_choice(f"{sk.name}/k4") == (sk, "h", 1, 4)
    for bad in (f"{coop.name}/k4", f"{sk.name}/k3", f"{sk.name}/k32"):
        with pytest.raises(UsageError):
            cutlass_sm90.parse_choice(bad)
    # 128 x 1024 in 128 x 128 tiles: 8 tiles on 132 SMs; K = 4096 keeps 256 a slice at 16 splits
    few = GemmShape(128, 1024, 4096)
    assert cutlass_sm90.variant_names(sk, few, 132) == [f"{sk.name}/k{s}" for s in (2, 4, 8, 16)]
    assert cutlass_sm90.variant_names(sk, GemmShape(128, 1024, 1024), 132) == [f"{sk.name}/k{s}" for s in (2, 4)]
    assert cutlass_sm90.variant_names(coop, few, 132) == []
    # the tuner adds the fastest stream-K configuration's splits even when it is not among the leaders
    # (on the CPU num_sms is 4: 64 x 256 makes 2 tiles of 64 x 128 and of 128 x 128)
    screened = {"cutlass_64x128x64_c1x1_pingpong": {"ms": 1.0}, "cutlass_128x128x64_c1x1_coop": {"ms": 1.1},
                sk.name: {"ms": 1.5}, "cutlass_128x256x64_c1x1_streamk": {"ms": 2.0}}
    picked = tune.variants(screened, Problem(GemmShape(64, 256, 4096), "nn", "cpu"),
                           tune.TuneSettings(families=("cutlass",), cutlass_variants=2))
    assert picked == [f"{sk.name}/k{s}" for s in (2, 4, 8, 16)]
    with pytest.raises(UsageError, match="splits"):
        cutlass_sm90.launch(torch.zeros(8, 8, dtype=torch.float16), torch.zeros(8, 8, dtype=torch.float16),
                            torch.zeros(8, 8, dtype=torch.float16), coop, "nn", "h", 1, 4)


def test_the_tuner_and_dispatcher_know_the_family(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "cutlass" in families.searched() and "cutlass" not in tune.OURS  # opt-in: measured on a sample only
    assert tune._is_ours("cutlass_128x128x64_c1x1_coop")
    # the CPU has no Hopper: asking for the family adds nothing there
    settings = tune.TuneSettings(families=("cutlass",))
    assert tune.our_choices(GemmShape(4096, 4096, 4096), "nn", "cpu", settings) == []
    # a nearest-shape lookup does not hand a CUTLASS choice on (not `transferred`); tuning on first
    # use times it, and the tuner takes it by name beside the families it was asked for
    table = dispatch.Table({"gpu": "g", "entries": [{"M": 4096, "N": 4096, "K": 4096, "dtype": "float16",
                                                     "layout": "nn", "choice": "cutlass_128x256x64_c2x1_coop"}]})
    assert table.lookup("float16", "nn", 3000, 4096, 4096) == ("torch", "default")
    assert table.nearest("float16", "nn", 3000, 4096, 4096) == "cutlass_128x256x64_c2x1_coop"
    named = tune.TuneSettings(families=(), kernels=("cutlass_128x256x64_c2x1_coop",))
    assert tune.our_choices(GemmShape(3000, 4096, 4096), "nn", "cpu", named) == ["cutlass_128x256x64_c2x1_coop"]
    with pytest.raises(UsageError, match="not a CUTLASS config name"):
        choices.make_choice("cutlass_nonsense", "nn", torch.zeros(8, 8), torch.zeros(8, 8))


# ---------------------------------------------------------------- CPU, slow: one real build


@pytest.mark.slow
@needs_nvcc
@needs_headers
def test_a_real_instance_builds_for_sm90a_and_agrees_with_why_not(tmp_path: Path) -> None:
    # one cooperative instance: 60-80 s of nvcc on a busy 2-core machine
    cfg = C("cutlass_128x128x64_c1x1_coop")
    started = time.perf_counter()
    [built] = cutlass_build.build_all([(cfg, "float16", "nt")], out_dir=tmp_path)
    assert built.error is None, built.error
    print(f"nvcc built {built.path} in {time.perf_counter() - started:.1f} s")
    lib = cutlass_sm90.Library(built.path)  # loads without a GPU: nothing runs until a launch
    assert lib.name() == b"cutlass_128x128x64_c1x1_coop/float16/nt"
    assert lib.version() == int("".join(f"{int(p):02d}" for p in cutlass_build.header_version().split(".")))
    # CUTLASS's own can_implement takes exactly the shapes why_not lets through
    for m, n, k in ((1000, 1024, 4096), (1, 8, 8), (128, 128, 100), (128, 100, 128), (7, 50264, 768)):
        ok = cutlass_sm90.applicable(GemmShape(m, n, k), "nt", cfg)
        status = lib.can_implement(m, n, k, k, k, n, 0, 1, 1)
        assert (status == 0) == ok, (m, n, k, lib.status(status))
    # every raster order and swizzle is a run-time setting the library takes
    for raster, swizzle in ((1, 2), (2, 8), (0, 4)):
        assert lib.can_implement(1000, 1024, 4096, 4096, 4096, 1024, raster, swizzle, 1) == 0
    # a persistent scheduler has no split-K: the library says so instead of ignoring it
    assert lib.status(lib.can_implement(1000, 1024, 4096, 4096, 4096, 1024, 0, 1, 4)).startswith("split-K asked")


# ---------------------------------------------------------------- GPU (Hopper)


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


needs_hopper = pytest.mark.skipif(not _hopper(), reason="needs a Hopper GPU (sm_90)")

GPU_CONFIGS = ["cutlass_128x128x64_c1x1_coop", "cutlass_128x256x64_c2x1_coop", "cutlass_256x128x64_c1x2_coop",
               "cutlass_64x128x64_c1x1_pingpong", "cutlass_64x256x64_c2x1_pingpong", "cutlass_128x128x64_c1x2_pingpong",
               "cutlass_128x128x64_c1x1_streamk", "cutlass_128x256x64_c1x1_streamk"]
# (M, N, K): ragged M (1000 rows cut every tile), tiny, one tile, long K over few tiles (stream-K splits it)
GPU_SHAPES = [(1000, 1024, 4096), (1, 8, 8), (128, 128, 64), (256, 512, 8192), (333, 136, 72)]


@pytest.fixture(scope="module")
def prebuilt() -> None:
    """Build every instance the GPU tests use at once, one nvcc per core (each takes about a minute)."""
    if not _hopper():
        return
    built = cutlass_build.build_all([(C(n), d, lay) for n in GPU_CONFIGS for d in ("float16", "bfloat16")
                                    for lay in ("nn", "nt")])
    failed = [b.error for b in built if b.error]
    assert not failed, failed[0]


def _error(name: str, m: int, n: int, k: int, dtype: str, layout: str, seed: int = 0) -> float:
    a, b = choices.make_inputs(GemmShape(m, n, k, dtype), layout, "cuda", seed)
    out = cutlass_sm90.matmul(a, b, C(name), layout)
    assert out.shape == (m, n) and out.dtype == a.dtype
    return choices.rel_error(out, choices.reference(a, b, layout))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("name", GPU_CONFIGS)
@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matches_torch_in_fp32(prebuilt: None, name: str, layout: str, dtype: str) -> None:
    for m, n, k in GPU_SHAPES:
        assert _error(name, m, n, k, dtype, layout) < choices.tolerance(dtype), (m, n, k)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("name", ["cutlass_128x128x64_c1x2_pingpong", "cutlass_128x256x64_c2x1_coop",
                                  "cutlass_128x128x64_c1x1_streamk"])
@pytest.mark.parametrize("variant", ["m1", "m8", "n2", "n4"])
def test_raster_and_swizzle_variants_match_torch(prebuilt: None, name: str, variant: str) -> None:
    cfg, raster, swizzle, _ = cutlass_sm90.parse_choice(f"{name}/{variant}")
    for m, n, k in ((2048, 3072, 512), (1000, 1024, 4096), (333, 136, 72)):
        a, b = choices.make_inputs(GemmShape(m, n, k), "nn", "cuda", 7)
        out = cutlass_sm90.matmul(a, b, cfg, "nn", raster, swizzle)
        assert choices.rel_error(out, choices.reference(a, b, "nn")) < choices.tolerance("float16"), (m, n, k)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("name", ["cutlass_128x128x64_c1x1_streamk", "cutlass_128x256x64_c1x1_streamk"])
@pytest.mark.parametrize("splits", [2, 4, 16])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_split_k_variants_match_torch(prebuilt: None, name: str, splits: int, layout: str) -> None:
    # few tiles over a long K (the class split-K is for), ragged M, and a K that 16 slices cut unevenly
    for m, n, k in ((128, 1024, 4096), (1000, 256, 8192), (64, 512, 4104)):
        for seed in (3, 4):  # the second call reuses the workspace of partial tiles
            a, b = choices.make_inputs(GemmShape(m, n, k), layout, "cuda", seed)
            out = cutlass_sm90.matmul(a, b, C(name), layout, splits=splits)
            assert choices.rel_error(out, choices.reference(a, b, layout)) < choices.tolerance("float16"), (m, n, k)


@pytest.mark.gpu
@needs_hopper
def test_a_second_call_reuses_the_stream_k_workspace(prebuilt: None) -> None:
    # stream-K keeps partial tiles and flags in the workspace; CUTLASS clears it on the stream before each run
    for seed in (1, 2, 3):
        assert _error("cutlass_128x128x64_c1x1_streamk", 256, 512, 8192, "float16", "nn", seed) < 1e-3


@pytest.mark.gpu
@needs_hopper
def test_launch_runs_on_the_current_torch_stream(prebuilt: None) -> None:
    cfg = C("cutlass_128x256x64_c2x1_coop")
    a_src, b_src = choices.make_inputs(GemmShape(1000, 1024, 4096), "nt", "cuda", 0)
    cutlass_sm90.matmul(a_src, b_src, cfg, "nt")  # load first
    a, b = torch.zeros_like(a_src), torch.zeros_like(b_src)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        # the side stream is busy before it fills a and b: a kernel on any other stream would read zeros
        torch.cuda._sleep(100_000_000)
        a.copy_(a_src)
        b.copy_(b_src)
        out = cutlass_sm90.matmul(a, b, cfg, "nt")
    torch.cuda.current_stream().wait_stream(side)
    assert choices.rel_error(out, choices.reference(a_src, b_src, "nt")) < 1e-3


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("name", ["cutlass_64x128x64_c1x1_pingpong", "cutlass_128x128x64_c1x1_streamk"])
def test_launch_works_inside_cuda_graph_capture(prebuilt: None, name: str) -> None:
    cfg = C(name)
    a, b = choices.make_inputs(GemmShape(1000, 1024, 4096, "bfloat16"), "nn", "cuda", 0)
    out = torch.empty(1000, 1024, dtype=a.dtype, device="cuda")
    cutlass_sm90.launch(a, b, out, cfg, "nn")  # load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cutlass_sm90.launch(a, b, out, cfg, "nn")
    a2, b2 = choices.make_inputs(GemmShape(1000, 1024, 4096, "bfloat16"), "nn", "cuda", 7)
    a.copy_(a2)
    b.copy_(b2)
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert choices.rel_error(out, choices.reference(a2, b2, "nn")) < choices.tolerance("bfloat16")


@pytest.mark.gpu
@needs_hopper
def test_launch_refuses_unaligned_and_strided_operands(prebuilt: None) -> None:
    cfg = C("cutlass_128x128x64_c1x1_coop")
    a, b = choices.make_inputs(GemmShape(64, 64, 64), "nn", "cuda", 0)
    with pytest.raises(UsageError, match="contiguous"):
        cutlass_sm90.matmul(a, b.t(), cfg, "nn")
    with pytest.raises(UsageError, match="16-byte aligned"):
        cutlass_sm90.matmul(a.flatten()[1 : 1 + 64 * 56].view(64, 56), b[:56], cfg, "nn")
    with pytest.raises(UsageError, match="not a multiple of 8"):
        cutlass_sm90.matmul(a[:, :60].contiguous(), b[:60], cfg, "nn")
    with pytest.raises(UsageError, match="float16 or bfloat16"):
        cutlass_sm90.matmul(a.float(), b.float(), cfg, "nn")


@pytest.mark.gpu
@needs_hopper
def test_the_tuner_offers_and_verifies_the_family(prebuilt: None) -> None:
    shape = GemmShape(1000, 1024, 4096)
    names = tune.our_choices(shape, "nt", "cuda", tune.TuneSettings(families=("cutlass",)))
    assert names and all(n.startswith("cutlass_") for n in names)
    sb = tune.ShapeBench(shape, "nt", "cuda")
    assert sb.verify(names[0]) < choices.tolerance("float16")
