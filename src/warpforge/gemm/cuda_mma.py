"""A CUDA C++ HGEMM kernel family (kernels/mma_gemm.cu: mma.sync + ldmatrix + cp.async) and its search space.

Configs (`MmaConfig`, `configs()`), the shapes each one can run (`applicable`), a CPU-side nvcc
compile check for pruning, and `launch` / `matmul`, which compile the source with NVRTC through CuPy
on first use and launch it on torch's current stream (so CUDA graph capture works). Timing and the
choice of a config per shape belong to the tuner, not here.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from warpforge.errors import UsageError
from warpforge.gemm.family import GemmFamily, Problem
from warpforge.gemm.layout import LAYOUTS, GemmFn, check_operands

if TYPE_CHECKING:
    import torch

    from warpforge.gemm.shapes import GemmShape

"""nn: B is (K, N) row-major. nt: B is (N, K) row-major (a linear layer's weight) and C = A @ B.T."""

CUDA_TYPES = {"float16": "half", "bfloat16": "__nv_bfloat16"}

# Shared memory one block may opt into on H100 (compute capability 9.0): 227 KB = 232,448 bytes
# (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"). Above 48 KB a
# kernel must raise its cudaFuncAttributeMaxDynamicSharedMemorySize first.
SMEM_LIMIT = 227 * 1024
SMEM_DEFAULT_LIMIT = 48 * 1024

# Registers: at most 255 per thread and 65,536 per block (compute capability 9.0). `MmaConfig.registers`
# estimates a thread's use as its fp32 accumulators, plus the A and B fragments of every k16 step of a
# stage (ptxas 13.0 hoists all of a stage's ldmatrix loads ahead of its MMAs), plus 48 for addresses
# and indices. Checked against ptxas -v for sm_90a: 64 x 64 warp tiles use 235-248 registers at bk 32
# and spill at bk 64 (estimate 304), which is why the estimate is a hard limit here.
MAX_REGISTERS = 255
REGISTER_FILE = 65536
REGISTER_OVERHEAD = 48

MAX_GRID_Y = 65535  # gridDim.y limit; the kernel puts block rows (M) on y

COMPILE_TIMEOUT_S = 120


@dataclass(frozen=True, order=True)
class MmaConfig:
    bm: int
    bn: int
    bk: int
    warps_m: int
    warps_n: int
    stages: int

    @property
    def name(self) -> str:
        return f"mma_{self.bm}x{self.bn}x{self.bk}_w{self.warps_m}x{self.warps_n}_s{self.stages}"

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory of one block: every stage holds a BM x BK tile of A and BN x BK of B, 2 bytes each."""
        return self.stages * (self.bm + self.bn) * self.bk * 2

    @property
    def accumulators(self) -> int:
        """fp32 accumulator registers per thread."""
        return (self.bm // self.warps_m) * (self.bn // self.warps_n) // 32

    @property
    def registers(self) -> int:
        """Estimated registers per thread (see MAX_REGISTERS): accumulators + a stage's fragments + overhead."""
        fragments = (self.bm // self.warps_m) // 16 * 4 + (self.bn // self.warps_n) // 8 * 2
        return self.accumulators + (self.bk // 16) * fragments + REGISTER_OVERHEAD

    @property
    def problem(self) -> str | None:
        """Why the kernel cannot be built with this config, or None; mirrors mma_gemm.cu's static_asserts."""
        if self.bk not in (32, 64):
            return f"bk must be 32 or 64, not {self.bk}"
        if not 2 <= self.stages <= 4:
            return f"stages must be 2, 3 or 4, not {self.stages}"
        if min(self.bm, self.bn, self.warps_m, self.warps_n) < 1:
            return "tile sizes and warp counts must be positive"
        if self.bm % (16 * self.warps_m) or self.bn % (16 * self.warps_n):
            return f"warp tile {self.bm}/{self.warps_m} x {self.bn}/{self.warps_n} is not made of 16 x 16 MMA pairs"
        if self.bn != 32 and self.bn % 64:
            return f"bn must be 32 or a multiple of 64 (the swizzle of a (K, N) B tile), not {self.bn}"
        if self.threads > 1024:
            return f"{self.threads} threads exceed 1,024 per block"
        budget = min(MAX_REGISTERS, REGISTER_FILE // self.threads)
        if self.registers > budget:
            return f"about {self.registers} registers per thread exceed {budget} (they would spill)"
        if self.smem_bytes > SMEM_LIMIT:
            return f"{self.smem_bytes} bytes of shared memory exceed {SMEM_LIMIT}"
        return None

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MmaConfig:
        try:
            cfg = cls(**{key: int(data[key]) for key in ("bm", "bn", "bk", "warps_m", "warps_n", "stages")})
        except (KeyError, TypeError, ValueError):
            raise UsageError(f"an MMA config needs integer bm, bn, bk, warps_m, warps_n and stages, got {data!r}") from None
        if cfg.problem:
            raise UsageError(f"MMA config {cfg.name} is invalid: {cfg.problem}")
        return cfg

    @classmethod
    def from_name(cls, name: str) -> MmaConfig:
        """The inverse of `name`: "mma_128x128x32_w2x2_s3" -> MmaConfig(128, 128, 32, 2, 2, 3)."""
        match = _NAME.fullmatch(name)
        if not match:
            raise UsageError(f"{name!r} is not an MMA config name like mma_128x128x32_w2x2_s3")
        return cls.from_dict(dict(zip(("bm", "bn", "bk", "warps_m", "warps_n", "stages"), match.groups())))


_NAME = re.compile(r"mma_(\d+)x(\d+)x(\d+)_w(\d+)x(\d+)_s(\d+)")


# (bm, bn, bk, warps_m, warps_n, stages). Large tiles load the fewest bytes per FLOP and suit big
# GEMMs (64 x 64 warp tiles only at bk 32: see MAX_REGISTERS); 64-wide and 32-row tiles give small-M (decode) and small-N shapes enough blocks to fill
# H100's 132 SMs. Warp tiles are 32-64 x 32-64; stages 3-4 hide global latency, 2 frees shared memory.
_SPACE = (
    # 128 x 128: four 64 x 64 warps (128 threads) or eight 64 x 32 warps (256 threads)
    (128, 128, 32, 2, 2, 3), (128, 128, 32, 2, 2, 4),
    (128, 128, 32, 2, 4, 3), (128, 128, 32, 2, 4, 4), (128, 128, 64, 2, 4, 3), (128, 128, 64, 2, 4, 4),
    # 128 x 256 and 256 x 128: eight 64 x 64 warps, the most reuse per byte loaded
    (128, 256, 32, 2, 4, 3), (128, 256, 32, 2, 4, 4),
    (256, 128, 32, 4, 2, 3), (256, 128, 32, 4, 2, 4),
    # 64-wide tiles: twice the blocks of 128 x 128 for shapes that would leave SMs idle
    (128, 64, 32, 2, 2, 3), (128, 64, 32, 2, 2, 4), (128, 64, 64, 2, 2, 3),
    (64, 128, 32, 2, 2, 3), (64, 128, 32, 2, 2, 4), (64, 128, 64, 2, 2, 3),
    (64, 256, 32, 1, 4, 3), (256, 64, 32, 4, 1, 3),
    (64, 64, 32, 2, 2, 2), (64, 64, 32, 2, 2, 3), (64, 64, 32, 2, 2, 4), (64, 64, 64, 2, 2, 3),
    # 32-row tiles for decode (M <= 32): less wasted MMA work on padded rows
    (32, 128, 64, 1, 4, 4), (32, 256, 64, 1, 4, 3),
)


def configs() -> list[MmaConfig]:
    """The search space, every entry buildable (see `MmaConfig.problem`)."""
    return [MmaConfig(*entry) for entry in _SPACE]


def why_not(shape: GemmShape, layout: str, cfg: MmaConfig) -> str | None:
    """One line saying why `cfg` cannot compute `shape` in `layout`, or None if it can."""
    return _why_not(shape.M, shape.N, shape.K, shape.dtype, layout, cfg)


def applicable(shape: GemmShape, layout: str, cfg: MmaConfig) -> bool:
    return why_not(shape, layout, cfg) is None


def _why_not(m: int, n: int, k: int, dtype: str, layout: str, cfg: MmaConfig) -> str | None:
    if layout not in LAYOUTS:
        return f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}"
    if dtype not in CUDA_TYPES:
        return f"dtype must be one of {', '.join(CUDA_TYPES)}, not {dtype!r}"
    if cfg.problem:
        return cfg.problem
    # every 16-byte cp.async chunk of a row must lie wholly inside or outside the matrix, and rows
    # must start 16-byte aligned
    if k % 8:
        return f"K={k} is not a multiple of 8 (16-byte rows for cp.async)"
    if layout == "nn" and n % 8:
        return f"N={n} is not a multiple of 8 (16-byte rows of a (K, N) B for cp.async)"
    if -(-m // cfg.bm) > MAX_GRID_Y:
        return f"M={m} needs more than {MAX_GRID_Y} block rows of {cfg.bm}"
    return None


def compile_options(cfg: MmaConfig, dtype: str, layout: str, arch: str | None = "sm_90a") -> tuple[str, ...]:
    """The -D options of one kernel instance; `arch` None leaves the target to the caller (CuPy picks the device's)."""
    if dtype not in CUDA_TYPES:
        raise UsageError(f"dtype must be one of {', '.join(CUDA_TYPES)}, not {dtype!r}")
    if layout not in LAYOUTS:
        raise UsageError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    options = [
        "--std=c++17",
        f"-DBM={cfg.bm}", f"-DBN={cfg.bn}", f"-DBK={cfg.bk}",
        f"-DWARPS_M={cfg.warps_m}", f"-DWARPS_N={cfg.warps_n}", f"-DSTAGES={cfg.stages}",
        f"-DDTYPE={CUDA_TYPES[dtype]}", f"-DB_KMAJOR={int(layout == 'nt')}",
    ]
    if arch:
        options.append(f"--gpu-architecture={arch}")
    return tuple(options)


@functools.cache
def source() -> str:
    return importlib.resources.files("warpforge.gemm").joinpath("kernels/mma_gemm.cu").read_text()


def _nvcc() -> str:
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return str(Path(home) / "bin" / "nvcc")
    raise UsageError("nvcc not found: install the CUDA toolkit or set CUDA_HOME")


def _first_errors(log: str, lines: int = 6) -> str:
    """The compiler's first error lines (with the line after each, which shows the source), else its first lines."""
    all_lines = [line for line in log.splitlines() if line.strip()]
    errors = [i for i, line in enumerate(all_lines) if "error" in line.lower()]
    picked = sorted({j for i in errors for j in (i, i + 1) if j < len(all_lines)}) if errors else range(len(all_lines))
    return "\n".join(all_lines[j] for j in list(picked)[:lines])


def compile_check(cfg: MmaConfig, dtype: str, layout: str, arch: str = "sm_90a") -> None:
    """Compile one instance with nvcc to a cubin on the CPU; raises UsageError with nvcc's first errors if it fails."""
    nvcc = _nvcc()
    options = compile_options(cfg, dtype, layout, arch)
    what = f"{cfg.name} ({dtype}, {layout}, {arch})"
    with tempfile.TemporaryDirectory(prefix="warpforge-mma-") as tmp:
        cu = Path(tmp) / "mma_gemm.cu"
        cu.write_text(source())
        cmd = [nvcc, "-cubin", "-o", str(Path(tmp) / "mma_gemm.cubin"), *options, str(cu)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise UsageError(f"nvcc took more than {COMPILE_TIMEOUT_S} s on mma_gemm {what}") from None
    if proc.returncode != 0:
        log = (proc.stderr + proc.stdout).replace(str(cu), "mma_gemm.cu")  # not the deleted temp path
        raise UsageError(f"mma_gemm does not compile for {what}:\n{_first_errors(log)}")


# ---------------------------------------------------------------- GPU: NVRTC through CuPy

_KERNELS: dict[tuple[MmaConfig, str, str, int], Any] = {}


def _cupy() -> Any:
    try:
        import cupy
    except ImportError:
        raise UsageError("the NVRTC GEMM kernels need CuPy: pip install 'warpforge[nvrtc]'") from None
    return cupy


def _kernel(cfg: MmaConfig, dtype: str, layout: str, device: int) -> Any:
    """The compiled kernel for one instance on one device, built once (NVRTC) and cached."""
    key = (cfg, dtype, layout, device)
    kernel = _KERNELS.get(key)
    if kernel is None:
        cupy = _cupy()
        from cupy.cuda.compiler import CompileException

        with cupy.cuda.Device(device):
            try:  # NVRTC runs in RawModule() or in get_function(), depending on the CuPy version
                module = cupy.RawModule(code=source(), options=compile_options(cfg, dtype, layout, arch=None))
                kernel = module.get_function("mma_gemm")
            except CompileException as exc:
                raise UsageError(f"NVRTC cannot compile mma_gemm {cfg.name} ({dtype}, {layout}):\n"
                                 f"{_first_errors(str(exc))}") from None
            # needed above 48 KB, harmless below; it also loads the module now, not in the first launch
            # (which might be under CUDA graph capture)
            kernel.max_dynamic_shared_size_bytes = cfg.smem_bytes
        _KERNELS[key] = kernel
    return kernel


def launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, cfg: MmaConfig, layout: str) -> None:
    """out = a @ b ("nn", b is (K, N)) or a @ b.T ("nt", b is the (N, K) weight), on torch's current stream.

    The first call for a (config, dtype, layout, device) compiles; later calls allocate and synchronize
    nothing, so they can be captured in a CUDA graph.
    """
    import torch

    m, n, k, dtype = check_operands(a, b, out, layout, "mma_gemm", "cp.async")
    reason = _why_not(m, n, k, dtype, layout, cfg)
    if reason:
        raise UsageError(f"mma_gemm {cfg.name} cannot compute M={m} N={n} K={k} {layout}: {reason}")
    if m == 0 or n == 0:
        return
    device = a.device.index if a.device.index is not None else torch.cuda.current_device()
    kernel = _kernel(cfg, dtype, layout, device)
    cupy = _cupy()
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream(a.device).cuda_stream, device)
    grid = (-(-n // cfg.bn), -(-m // cfg.bm), 1)
    args = (a.data_ptr(), b.data_ptr(), out.data_ptr(), np.int32(m), np.int32(n), np.int32(k))
    with cupy.cuda.Device(device), stream:
        kernel(grid, (cfg.threads, 1, 1), args, shared_mem=cfg.smem_bytes)


def matmul(a: torch.Tensor, b: torch.Tensor, cfg: MmaConfig, layout: str = "nn") -> torch.Tensor:
    """A new (M, N) tensor = a @ b ("nn") or a @ b.T ("nt"), in a's dtype."""
    import torch

    if layout not in LAYOUTS:
        raise UsageError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    if a.dim() != 2 or b.dim() != 2:
        raise UsageError(f"a and b must be 2-D, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    n = b.shape[1] if layout == "nn" else b.shape[0]
    out = torch.empty((a.shape[0], n), dtype=a.dtype, device=a.device)
    launch(a, b, out, cfg, layout)
    return out


class MmaFamily(GemmFamily):
    """`mma_<config>`: the mma.sync kernel above, on CUDA only."""

    name, form = "mma", "mma_<bm>x<bn>x<bk>_w<m>x<n>_s<stages>"
    transferred = timed_online = True

    def owns(self, choice: str) -> bool:
        return choice.startswith("mma_")

    def parse(self, choice: str) -> MmaConfig:
        return MmaConfig.from_name(choice)

    def configs(self, problem: Problem, limit: int, variants: int = 0) -> list[str]:
        """A third as many as `limit` (at least one), with tiles no larger than the problem (rounded up to a power of two)."""
        if problem.device != "cuda":
            return []
        shape = problem.shape
        m_cap, n_cap = max(32, 1 << (shape.M - 1).bit_length()), max(64, 1 << (shape.N - 1).bit_length())
        fit = [c for c in configs() if applicable(shape, problem.layout, c) and c.bm <= m_cap and c.bn <= n_cap]
        return [c.name for c in fit][: max(1, limit // 3)]

    def why_not(self, choice: str, shape: GemmShape, layout: str, device: str) -> str | None:
        if device != "cuda":
            return "the mma kernels run on CUDA GPUs only"
        return why_not(shape, layout, self.parse(choice))

    def build(self, choice: str, layout: str, a: torch.Tensor, b: torch.Tensor) -> GemmFn:
        cfg = self.parse(choice)
        return lambda x, y: matmul(x, y, cfg, layout)


FAMILY = MmaFamily()
