"""CUTLASS 3.x GEMMs for Hopper (sm_90a): warp-specialised wgmma mainloops fed by TMA, one family.

Its configurations are in cutlass_configs.py (re-exported here); each (config, dtype, layout) is a
plain shared library with extern "C" entry points (no torch extension: the library works with any
torch) that cutlass_build.py writes and builds with nvcc; here it is loaded with ctypes (`kernel`)
and launched on torch's current stream (`launch`, `matmul`). Timing and the choice of a config per
shape belong to the tuner, not here.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warpforge.errors import HarnessError, UsageError
from warpforge.gemm import cutlass_build
from warpforge.gemm.cutlass_configs import (CLUSTERS, ELEMENTS, MAX_ACCUMULATORS, MIN_K_PER_SPLIT, RASTERS,
                                            SCHEDULES, SPLITS, SWIZZLES, CutlassConfig, Variant, _why_not,
                                            applicable, candidate_configs, configs, parse_choice, variant_names,
                                            why_not)
from warpforge.gemm.family import GemmFamily, Problem
from warpforge.gemm.layout import LAYOUTS, GemmFn, check_operands

if TYPE_CHECKING:
    import torch

    from warpforge.gemm.shapes import GemmShape

__all__ = ["CLUSTERS", "ELEMENTS", "MAX_ACCUMULATORS", "MIN_K_PER_SPLIT", "RASTERS", "SCHEDULES", "SPLITS", "SWIZZLES",
           "CUTLASS_BUILD", "CutlassConfig", "FAMILY", "Library", "Variant", "applicable", "candidate_configs", "configs", "kernel", "launch",
           "matmul", "parse_choice", "variant_names", "why_not"]

# ---------------------------------------------------------------- GPU: ctypes


class Library:
    """One loaded instance: its extern "C" functions with their C signatures."""

    def __init__(self, path: Path) -> None:
        self.path = path
        lib = ctypes.CDLL(str(path))
        ints9 = [ctypes.c_int] * 9  # m, n, k, lda, ldb, ldd, raster, swizzle, splits
        self.version = lib.wf_cutlass_version
        self.version.restype, self.version.argtypes = ctypes.c_int, []
        self.name = lib.wf_cutlass_name
        self.name.restype, self.name.argtypes = ctypes.c_char_p, []
        self.status_string = lib.wf_cutlass_status_string
        self.status_string.restype, self.status_string.argtypes = ctypes.c_char_p, [ctypes.c_int]
        self.can_implement = lib.wf_cutlass_can_implement
        self.can_implement.restype, self.can_implement.argtypes = ctypes.c_int, ints9
        self.workspace_size = lib.wf_cutlass_workspace_size
        self.workspace_size.restype, self.workspace_size.argtypes = ctypes.c_size_t, ints9
        self.gemm = lib.wf_cutlass_gemm
        self.gemm.restype = ctypes.c_int
        self.gemm.argtypes = [ctypes.c_void_p] * 3 + ints9 + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]

    def status(self, code: int) -> str:
        return (self.status_string(code) or b"?").decode()


_libraries: dict[tuple[CutlassConfig, str, str], Library] = {}
_lock = threading.Lock()
_hopper: dict[int, bool] = {}
_workspaces: dict[tuple[int, int], Any] = {}


def kernel(cfg: CutlassConfig, dtype: str, layout: str, device: torch.device | None = None) -> Library:
    """The loaded library of one instance, built first if needed (a minute of nvcc: prebuild with
    `cutlass_build.build_all`); with `device`, also refuses a GPU that is not Hopper."""
    if device is not None:
        _require_hopper(device)
    key = (cfg, dtype, layout)
    lib = _libraries.get(key)
    if lib is None:
        path = cutlass_build.build(cfg, dtype, layout)  # outside the lock: a build takes a minute
        with _lock:
            if key not in _libraries:
                _libraries[key] = Library(path)
            lib = _libraries[key]
        if device is not None:
            import torch

            # the library has its own (static) CUDA runtime: start it now, not in a first launch that
            # may be under CUDA graph capture
            with torch.cuda.device(device):
                lib.workspace_size(64, 64, 64, 64, 64, 64, 0, 1, 1)
    return lib


def _require_hopper(device: torch.device) -> None:
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _hopper:
        _hopper[index] = torch.cuda.get_device_capability(index) == (9, 0)
    if not _hopper[index]:
        raise UsageError(f"the CUTLASS sm90 kernels run only on Hopper (compute capability 9.0), not on "
                         f"{torch.cuda.get_device_name(index)}")


def _workspace(device: torch.device, nbytes: int) -> Any:
    """A device buffer of at least `nbytes`, cached per (device, stream) like triton_gemm's: two
    streams never share one. Under CUDA graph capture a fresh one belongs to the graph."""
    import torch

    if torch.cuda.is_current_stream_capturing():
        return torch.empty(nbytes, dtype=torch.uint8, device=device)
    key = (device.index or 0, torch.cuda.current_stream(device).cuda_stream)
    ws = _workspaces.get(key)
    if ws is None or ws.numel() < nbytes:
        ws = _workspaces[key] = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return ws


def launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, cfg: CutlassConfig, layout: str,
           raster: str = "h", swizzle: int = 1, splits: int = 1) -> None:
    """out = a @ b ("nn", b is (K, N)) or a @ b.T ("nt", b is the (N, K) weight), on torch's current
    stream, the tiles walked in `raster` order with `swizzle` (RASTERS, SWIZZLES), K cut into
    `splits` slices (SPLITS; stream-K configurations only). After the first call per (device,
    stream) it allocates nothing (the stream-K workspace is cached)."""
    import torch

    if raster not in RASTERS or swizzle not in SWIZZLES:
        raise UsageError(f"raster must be one of {', '.join(RASTERS)} and swizzle one of {SWIZZLES}, "
                         f"not {raster!r} and {swizzle!r}")
    if splits != 1 and (splits not in SPLITS or cfg.schedule != "streamk"):
        raise UsageError(f"splits must be 1, or one of {SPLITS} on a stream-K configuration; not {splits!r} on "
                         f"{cfg.name}")

    m, n, k, dtype = check_operands(a, b, out, layout, "a CUTLASS kernel", "TMA")
    reason = _why_not(m, n, k, dtype, layout, cfg)
    if reason:
        raise UsageError(f"CUTLASS {cfg.name} cannot compute M={m} N={n} K={k} {layout}: {reason}")
    if m == 0 or n == 0:
        return
    if k == 0:
        out.zero_()
        return
    lib = kernel(cfg, dtype, layout, a.device)
    ld = (k, b.stride(0), n)  # lda, ldb (N for nn, K for nt), ldd
    with torch.cuda.device(a.device):  # the library's cudart uses the thread's current device
        order = (RASTERS[raster], swizzle, splits)
        nbytes = lib.workspace_size(m, n, k, *ld, *order)
        ws = _workspace(a.device, nbytes).data_ptr() if nbytes else None
        stream = torch.cuda.current_stream(a.device).cuda_stream
        status = lib.gemm(a.data_ptr(), b.data_ptr(), out.data_ptr(), m, n, k, *ld, *order, stream, ws, nbytes)
    if status:
        raise HarnessError(f"CUTLASS {cfg.name} ({dtype}, {layout}) failed on M={m} N={n} K={k}: {lib.status(status)}")


def matmul(a: torch.Tensor, b: torch.Tensor, cfg: CutlassConfig, layout: str = "nn", raster: str = "h",
           swizzle: int = 1, splits: int = 1) -> torch.Tensor:
    """A new (M, N) tensor = a @ b ("nn") or a @ b.T ("nt"), in a's dtype."""
    import torch

    if layout not in LAYOUTS:
        raise UsageError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    if a.dim() != 2 or b.dim() != 2:
        raise UsageError(f"a and b must be 2-D, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    n = b.shape[1] if layout == "nn" else b.shape[0]
    out = torch.empty((a.shape[0], n), dtype=a.dtype, device=a.device)
    launch(a, b, out, cfg, layout, raster, swizzle, splits)
    return out


CUTLASS_BUILD = "WARPFORGE_CUTLASS_BUILD"  # 1: a CUTLASS choice whose library is not built is built on first use


class CutlassFamily(GemmFamily):
    """`cutlass_<config>[/<raster><swizzle>|/k<splits>]`: the libraries above, on Hopper only. A
    matmul call does not start a minute of nvcc unasked (`ready`); the tuner builds in parallel first."""

    name, form = "cutlass", "cutlass_<config>[/<raster><swizzle>|/k<splits>]"
    timed_online = True
    # not `transferred`: on the 96 held-out shapes of 2026-11-27 the 9 CUTLASS choices handed on from
    # the nearest measured shape read 0.94x over torch.matmul (4 below 0.99x, the worst 0.73x;
    # docs/gemm.md), where the one Triton choice read 1.07x. Tuning on first use times it instead.

    def owns(self, choice: str) -> bool:
        return choice.startswith("cutlass_")

    def parse(self, choice: str) -> Variant:
        return parse_choice(choice)

    def configs(self, problem: Problem, limit: int, variants: int = 0) -> list[str]:
        """Up to `limit`: not cut to a third like mma's, this is the Hopper-native family (20 configurations)."""
        if self._not_hopper(problem.device):
            return []
        return [c.name for c in candidate_configs(problem.shape, problem.layout, problem.sms)][:limit]

    def why_not(self, choice: str, shape: GemmShape, layout: str, device: str) -> str | None:
        return self._not_hopper(device) or why_not(shape, layout, self.parse(choice).cfg)

    def build(self, choice: str, layout: str, a: torch.Tensor, b: torch.Tensor) -> GemmFn:
        import torch

        cfg, raster, swizzle, splits = self.parse(choice)
        dtype = {torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(a.dtype)
        if dtype is None:
            raise UsageError(f"the CUTLASS kernels take float16 or bfloat16, not {a.dtype}")
        # built (or loaded) now, not at the first call: a missing nvcc or header, or a GPU that is not
        # Hopper, is a UsageError here, which the dispatcher turns into its fallback
        kernel(cfg, dtype, layout, a.device)
        return lambda x, y: matmul(x, y, cfg, layout, raster, swizzle, splits)

    def ready(self, choice: str, dtype: str, layout: str) -> bool:
        """Whether the library is carried ($WARPFORGE_CUTLASS_LIB_DIR) or in the cache (`warpforge gemm
        build-cutlass`): a build is a minute of nvcc per configuration, which a matmul call does not
        start unasked, only with WARPFORGE_CUTLASS_BUILD=1."""
        if os.environ.get(CUTLASS_BUILD, "") not in ("", "0"):
            return True
        try:
            return cutlass_build.find_built(self.parse(choice).cfg, dtype, layout) is not None
        except UsageError:  # not a CUTLASS choice, or a dtype it has no instance of
            return False

    def prebuild(self, choices: list[str], dtype: str, layout: str) -> None:
        """One nvcc per core, once (the libraries are cached on disk); a failure is remembered by
        cutlass_build and shows in the choice's screen entry."""
        cutlass_build.build_all((self.parse(n).cfg, dtype, layout) for n in choices)

    def variants(self, ranked: list[str], problem: Problem, count: int) -> list[str]:
        """The `count` fastest configurations again with their tile scheduler's other raster orders and
        swizzles (run-time settings of the same library; `variant_names` says where they are worth
        timing), and the fastest stream-K configuration's split-K factors where it is not among them
        (its own heuristic may not split)."""
        if count <= 0:
            return []
        bases = [n for n in ranked if "/" not in n]  # never a variant's variants
        leaders = list(dict.fromkeys(bases[:count] + [n for n in bases if n.endswith("_streamk")][:1]))
        return [v for n in leaders for v in variant_names(self.parse(n).cfg, problem.shape, problem.sms)]

    @staticmethod
    def _not_hopper(device: str) -> str | None:
        import torch

        if device != "cuda" or torch.cuda.get_device_capability() != (9, 0):
            return "the CUTLASS sm90 kernels run only on Hopper (compute capability 9.0)"
        return None


FAMILY = CutlassFamily()
