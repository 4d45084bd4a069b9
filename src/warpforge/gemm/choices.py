"""Every way warpforge can compute one GEMM, by name — the baselines and our own kernels.

A *choice* is a string the tuner times, the dispatcher table stores and the benchmark reports:

| name | what runs |
|---|---|
| `torch` | `torch.matmul` in the layout the caller gave (cuBLAS) |
| `torch_padded` | K and N zero-padded to multiples of 8 per call, then `torch.matmul`, then the N columns copied out: cuBLAS's fast kernels need 16-byte rows |
| `cublaslt:<i>` | the i-th algorithm cuBLASLt's heuristic returns for this problem, through nvmath-python |
| `cublaslt:<i>/splitk<k>`, `cublaslt:<i>/swz0`, `…/swz1` | that algorithm reconfigured within its capabilities: split-K into k parts (with a reduction scheme it supports), or CTA swizzling set; checked by `cublasLtMatmulAlgoCheck`, which also sizes its workspace |
| `triton_<family>:<params>` | one of our Triton kernels (triton_gemm.py) |
| `mma_<params>` | our CUDA C++ mma.sync kernel (cuda_mma.py), compiled with NVRTC |
| `file:<path>` | a candidate file (`class ModelNew`, forward(a, b)) — e.g. the best kernel of `warpforge optimize` on a task from `warpforge gemm task` |

Layouts: "nn" means b is a (K, N) matrix; "nt" means b is the (N, K) weight of x @ W.T (what
nn.Linear stores). `a` is always (M, K) row-major. Every choice returns a new (M, N) tensor in the
input dtype, computed with fp32 accumulation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from warpforge.errors import UsageError
from warpforge.gemm.shapes import GemmShape

LAYOUTS = ("nn", "nt")
LT_LIMIT = 32  # algorithms asked of cuBLASLt's heuristic (cuBLAS 13.1 returned at most 8, research note §0.1)
LT_SPLIT_K = (2, 4, 8, 16)  # split-K variants tried, each part keeping at least LT_MIN_K_PER_SPLIT of K
LT_MIN_K_PER_SPLIT = 256
LT_MAX_WORKSPACE = 256 << 20  # bytes; a reconfiguration that needs more (split-K's partial sums on a large M x N) is refused
LT_REDUCTION_ORDER = (1, 2, 4)  # cublasLtReductionScheme_t bits: in place, then a compute-type, then an output-type workspace

GemmFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def torch_dtype(name: str) -> torch.dtype:
    return {"float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise UsageError(f"unknown GEMM layout {layout!r}: use nn (b is K x N) or nt (b is the N x K weight)")


def make_inputs(shape: GemmShape, layout: str, device: str | torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh random operands (normal, so no 0/1 shortcut passes), B shaped for `layout`."""
    check_layout(layout)
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = torch_dtype(shape.dtype)
    a = torch.randn((shape.M, shape.K), generator=gen, device=device, dtype=torch.float32).to(dtype)
    b_shape = (shape.K, shape.N) if layout == "nn" else (shape.N, shape.K)
    b = torch.randn(b_shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
    return a, b


def reference(a: torch.Tensor, b: torch.Tensor, layout: str) -> torch.Tensor:
    """fp32 product with TF32 off (fp64 on the CPU, where it is cheap)."""
    bb = b if layout == "nn" else b.t()
    if a.device.type == "cpu":
        return (a.double() @ bb.double()).float()
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return a.float() @ bb.float()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref||; inf when the output is the wrong shape or holds a NaN/inf."""
    if tuple(out.shape) != tuple(ref.shape):
        return math.inf
    o = out.float()
    if not torch.isfinite(o).all():
        return math.inf
    return float((o - ref).norm() / ref.norm().clamp_min(1e-30))


def tolerance(dtype: str) -> float:
    """Relative L2 error allowed. fp16 in / fp32 accumulate lands at ~2e-4 for every backend on an
    H100 (research note §5); bf16 has 3 fewer mantissa bits. An fp16-accumulating kernel lands
    near 1e-2 and fails."""
    return 1e-3 if dtype == "float16" else 8e-3


def _b_view(b: torch.Tensor, layout: str) -> torch.Tensor:
    return b if layout == "nn" else b.t()


def torch_choice(layout: str) -> GemmFn:
    return lambda a, b: torch.matmul(a, _b_view(b, layout))


def padded_choice(layout: str) -> GemmFn:
    def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        K = a.shape[1]
        N = b.shape[1] if layout == "nn" else b.shape[0]
        pk, pn = -K % 8, -N % 8
        ap = F.pad(a, (0, pk)) if pk else a
        if layout == "nn":
            bp = F.pad(b, (0, pn, 0, pk)) if pk or pn else b
        else:
            bp = (F.pad(b, (0, pk, 0, pn)) if pk or pn else b).t()
        out = torch.matmul(ap, bp)
        return out[:, :N].contiguous() if pn else out

    return run


def parse_cublaslt(name: str) -> tuple[int, dict[str, int]]:
    """`cublaslt:<i>[/splitk<k>|/swz<0|1>]` -> (i, the settings changed on top of algorithm i)."""
    head, _, variant = name.partition("/")
    try:
        index = int(head.split(":", 1)[1])
        if not variant:
            return index, {}
        if variant.startswith("splitk"):
            return index, {"split_k": int(variant[len("splitk"):])}
        if variant.startswith("swz") and variant[3:] in ("0", "1"):
            return index, {"cta_swizzling": int(variant[3:])}
    except (IndexError, ValueError):
        pass
    raise UsageError(f"{name!r} is not a cuBLASLt choice: cublaslt:<i>, cublaslt:<i>/splitk<k> or cublaslt:<i>/swz<0|1>")


def variant_names(index: int, caps: Any, current: dict[str, Any], K: int) -> list[str]:
    """The reconfigurations of heuristic algorithm `index` worth timing, within its capabilities
    (`caps`: nvmath's AlgorithmCapabilities) and what it already does (`current`): split-K where
    it supports split-K and a reduction scheme, each part keeping at least LT_MIN_K_PER_SPLIT of K;
    CTA swizzling flipped where it can be set."""
    names = []
    if getattr(caps, "splitk_support", 0) and reduction_scheme(caps) is not None:
        names += [f"cublaslt:{index}/splitk{k}" for k in LT_SPLIT_K
                  if K // k >= LT_MIN_K_PER_SPLIT and k != current.get("split_k")]
    if getattr(caps, "cta_swizzling_support", 0):
        names.append(f"cublaslt:{index}/swz{0 if current.get('cta_swizzling') else 1}")
    return names


def reduction_scheme(caps: Any) -> int | None:
    mask = int(getattr(caps, "reduction_scheme_mask", 0) or 0)
    return next((s for s in LT_REDUCTION_ORDER if mask & s), None)


class CublasLt:
    """One cuBLASLt plan per problem (shape, layout, dtype, device), through nvmath-python.

    `algorithms` are what the heuristic returns (up to LT_LIMIT); `call(name)` runs one of them,
    or a reconfiguration of one (`variant_names`), on new operands of the same problem. A
    reconfiguration is a copy of the algorithm with its settings changed, checked with
    `cublasLtMatmulAlgoCheck` (which refuses what this GPU and problem do not support and says
    how much workspace it needs) and planned on its own, so its workspace is sized for it.
    nvmath is imported lazily: it is optional.
    """

    _plans: dict[tuple[Any, ...], CublasLt] = {}

    def __init__(self, a: torch.Tensor, b: torch.Tensor, layout: str) -> None:
        try:
            from nvmath.linalg.advanced import Matmul
        except ImportError:
            raise UsageError("cuBLASLt baselines need nvmath-python: pip install 'warpforge[gemm]'") from None
        self.layout = layout
        self.K = int(a.shape[1])
        self._example = (a, b)
        self.mm = Matmul(a, _b_view(b, layout))
        self.mm.plan(preferences={"limit": LT_LIMIT})
        self.algorithms = list(self.mm.algorithms)
        self._variants: dict[str, tuple[Any, Any]] = {}  # name -> (its own Matmul plan, its Algorithm)

    @classmethod
    def forget_all(cls) -> None:
        """Drop every cached plan, and with it (once nothing else holds them) the operands, outputs
        and workspaces it keeps: a sweep over many shapes holds only the current shape's plans."""
        cls._plans.clear()

    @classmethod
    def for_problem(cls, a: torch.Tensor, b: torch.Tensor, layout: str) -> CublasLt:
        key = (tuple(a.shape), tuple(b.shape), tuple(a.stride()), tuple(b.stride()), a.dtype, layout, a.device)
        if key not in cls._plans:
            cls._plans[key] = cls(a, b, layout)
        return cls._plans[key]

    def names(self, vary: int = 0) -> list[str]:
        """Every heuristic algorithm, then the reconfigurations of the first `vary` of them."""
        out = [f"cublaslt:{i}" for i in range(len(self.algorithms))]
        for i in range(min(vary, len(self.algorithms))):
            current = self.describe(f"cublaslt:{i}")
            try:
                caps = self.algorithms[i].capabilities
            except Exception:  # a capability this cuBLASLt version cannot report: no variants of it
                continue
            out += variant_names(i, caps, current, self.K)
        return out

    def describe(self, name: str | int) -> dict[str, Any]:
        name = f"cublaslt:{name}" if isinstance(name, int) else name
        index, settings = parse_cublaslt(name)
        alg = self._variants[name][1] if settings and name in self._variants else self.algorithms[index]
        info: dict[str, Any] = {"index": index, **({"name": name} if settings else {})}
        for attr in ("algorithm_id", "tile", "stages", "split_k", "reduction_scheme", "cta_swizzling", "cluster_shape"):
            try:
                value = getattr(alg, attr)
                info[attr] = value if isinstance(value, (int, float, str)) or value is None else str(value)
            except Exception:  # an attribute this cuBLASLt version does not report
                pass
        return info

    def call(self, name: str | int) -> GemmFn:
        name = f"cublaslt:{name}" if isinstance(name, int) else name
        index, settings = parse_cublaslt(name)
        if index >= len(self.algorithms):
            raise UsageError(f"cuBLASLt returned {len(self.algorithms)} algorithms for this problem; "
                             f"cublaslt:{index} does not exist (re-run `warpforge gemm tune` on this GPU)")
        mm, alg = self._variant(name, index, settings) if settings else (self.mm, self.algorithms[index])

        def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            stream = torch.cuda.current_stream(a.device)
            mm.reset_operands(a=a, b=_b_view(b, self.layout), stream=stream)
            out: torch.Tensor = mm.execute(algorithm=alg, stream=stream)
            return out

        return run

    def _variant(self, name: str, index: int, settings: dict[str, int]) -> tuple[Any, Any]:
        if name not in self._variants:
            from nvmath.bindings import cublasLt as lt
            from nvmath.linalg.advanced import Algorithm, Matmul

            base = self.algorithms[index]
            alg = Algorithm.from_numpy(base.as_numpy())  # a copy: the heuristic's own stays as it was
            if "split_k" in settings:
                scheme = reduction_scheme(base.capabilities)
                if not base.capabilities.splitk_support or scheme is None:
                    raise UsageError(f"{name}: cuBLASLt algorithm {index} cannot split K on this problem")
                alg.split_k = settings["split_k"]
                alg.reduction_scheme = scheme
            if "cta_swizzling" in settings:
                alg.cta_swizzling = bool(settings["cta_swizzling"])
            checked = lt.MatmulHeuristicResult()
            mm = self.mm  # raises (CUBLAS_STATUS_NOT_SUPPORTED) when this configuration cannot run here
            lt.matmul_algo_check(mm.handle, mm.mm_desc, mm.a_layout_ptr, mm.b_layout_ptr, mm.c_layout_ptr,
                                 mm.d_layout_ptr, alg.algorithm.ptr, checked.ptr)
            if checked.workspace_size > LT_MAX_WORKSPACE:
                raise UsageError(f"{name}: needs {checked.workspace_size / 2**30:.2f} GiB of workspace on this problem, "
                                 f"more than the {LT_MAX_WORKSPACE >> 20} MiB allowed")
            alg.algorithm.workspace_size = checked.workspace_size
            own = Matmul(self._example[0], _b_view(self._example[1], self.layout))
            own.plan(algorithms=[alg])
            self._variants[name] = (own, own.algorithms[0])
        return self._variants[name]


def make_choice(name: str, layout: str, a: torch.Tensor, b: torch.Tensor) -> GemmFn:
    """The function for choice `name`; `a` and `b` are example operands (they fix the problem)."""
    check_layout(layout)
    if name == "torch":
        return torch_choice(layout)
    if name == "torch_padded":
        return padded_choice(layout)
    if name.startswith("cublaslt:"):
        return CublasLt.for_problem(a, b, layout).call(name)
    if name.startswith("triton_"):
        from warpforge.gemm import triton_gemm

        cfg = triton_gemm.TritonConfig.from_name(name)
        return lambda x, y: triton_gemm.matmul(x, y, cfg, layout)
    if name.startswith("mma_"):
        from warpforge.gemm import cuda_mma

        mcfg = cuda_mma.MmaConfig.from_name(name)
        return lambda x, y: cuda_mma.matmul(x, y, mcfg, layout)
    if name.startswith("file:"):
        return candidate_choice(name.split(":", 1)[1], a.device)
    raise UsageError(f"unknown GEMM choice {name!r}: expected torch, torch_padded, cublaslt:<i>, triton_<family>:..., "
                     "mma_..., file:<candidate.py>")


_candidates: dict[tuple[str, str], GemmFn] = {}


def candidate_choice(path: str, device: torch.device) -> GemmFn:
    """A candidate kernel file as a choice: its `ModelNew()` called as forward(a, b), with b in the
    task's layout. It runs in this process (the tuner verifies it again like every choice), so
    only name files you trust — e.g. ones the sandboxed evaluator already accepted."""
    import importlib.util
    from pathlib import Path

    key = (str(Path(path).resolve()), str(device))
    if key not in _candidates:
        if not Path(path).is_file():
            raise UsageError(f"candidate kernel {path} does not exist")
        spec = importlib.util.spec_from_file_location(f"warpforge_gemm_candidate_{len(_candidates)}", path)
        if spec is None or spec.loader is None:
            raise UsageError(f"cannot import {path} as a Python module")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not hasattr(module, "ModelNew"):
            raise UsageError(f"{path} defines no class ModelNew: it is not a warpforge candidate")
        model = module.ModelNew().to(device)
        _candidates[key] = lambda x, y: model(x, y)
    return _candidates[key]


TASK_TEMPLATE = '''import torch
import torch.nn as nn

# generated by `warpforge gemm task`: one {dtype} GEMM shape ({layout}) for the optimisation loop
M = {M}
N = {N}
K = {K}


class Model(nn.Module):
    """{doc}"""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return {expr}


def get_inputs():
    return [torch.randn(M, K, dtype=torch.{dtype}), torch.randn({b_shape}, dtype=torch.{dtype})]


def get_init_inputs():
    return []


WARPFORGE = {{
    "description": "{dtype} GEMM {M}x{N}x{K} ({layout}), fp32 accumulation",
    "sizes": {{"cpu": {{"M": {cM}, "N": {cN}, "K": {cK}}}, "gpu": {{"M": {M}, "N": {N}, "K": {K}}}}},
    "flops": "2*M*N*K",
    "bytes": "2*(M*K + K*N + M*N)",
}}
'''


def task_source(shape: GemmShape, layout: str) -> str:
    """A KernelBench-style task file for one shape, so `warpforge optimize` (an LLM or an agent)
    can search kernels for it; the CPU preset keeps the shape's alignment (odd stays odd)."""
    check_layout(layout)

    def small(v: int) -> int:
        return min(v, 64 + v % 8)

    nn_ = layout == "nn"
    return TASK_TEMPLATE.format(
        M=shape.M, N=shape.N, K=shape.K, dtype=shape.dtype, layout=layout, cM=small(shape.M), cN=small(shape.N),
        cK=small(shape.K), expr="torch.matmul(A, B)" if nn_ else "torch.matmul(A, B.t())",
        b_shape="K, N" if nn_ else "N, K",
        doc="C = A @ B, A (M, K), B (K, N)" if nn_ else "C = A @ W.T, A (M, K), W the (N, K) weight of nn.Linear")
