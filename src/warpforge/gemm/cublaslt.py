"""cuBLASLt as GEMM choices (`cublaslt:<i>`, `cublaslt:<i>/splitk<k>`, `cublaslt:<i>/swz<0|1>`), through
nvmath-python: the heuristic's algorithms for one problem, and reconfigurations of them within
their capabilities; a baseline family (`CublasLtFamily`) of families.py. nvmath is imported lazily
(it is optional)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from warpforge.errors import UsageError
from warpforge.gemm.family import GemmFamily, Problem
from warpforge.gemm.layout import GemmFn, b_view

if TYPE_CHECKING:
    from warpforge.gemm.shapes import GemmShape

LT_LIMIT = 32  # algorithms asked of cuBLASLt's heuristic (cuBLAS 13.1 returned at most 8, research note §0.1)
LT_SPLIT_K = (2, 4, 8, 16)  # split-K variants tried, each part keeping at least LT_MIN_K_PER_SPLIT of K
LT_MIN_K_PER_SPLIT = 256
LT_MAX_WORKSPACE = 256 << 20  # bytes; a reconfiguration that needs more (split-K's partial sums on a large M x N) is refused
LT_REDUCTION_ORDER = (1, 2, 4)  # cublasLtReductionScheme_t bits: in place, then a compute-type, then an output-type workspace


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
        self.mm = Matmul(a, b_view(b, layout))
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
            mm.reset_operands(a=a, b=b_view(b, self.layout), stream=stream)
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
            own = Matmul(self._example[0], b_view(self._example[1], self.layout))
            own.plan(algorithms=[alg])
            self._variants[name] = (own, own.algorithms[0])
        return self._variants[name]


class CublasLtFamily(GemmFamily):
    """The baseline of cuBLASLt's algorithms: an index names the i-th algorithm of one problem's own
    heuristic list, so a choice is never handed to another shape, and no plan is made while a CUDA
    graph is being captured."""

    name, form = "cublaslt", "cublaslt:<i>[/splitk<k>|/swz<0|1>]"
    ours = searched = capturable = False

    def owns(self, choice: str) -> bool:
        return choice.startswith("cublaslt:")

    def parse(self, choice: str) -> tuple[int, dict[str, int]]:
        return parse_cublaslt(choice)

    def configs(self, problem: Problem, limit: int, variants: int = 0) -> list[str]:
        """Every algorithm the heuristic returns for the problem's operands, then the reconfigurations
        of the first `variants` of them."""
        if problem.device != "cuda" or problem.operands is None:
            return []
        return CublasLt.for_problem(*problem.operands, problem.layout).names(variants)

    def why_not(self, choice: str, shape: GemmShape, layout: str, device: str) -> str | None:
        self.parse(choice)
        return None if device == "cuda" else "cuBLASLt runs on CUDA GPUs only"

    def build(self, choice: str, layout: str, a: torch.Tensor, b: torch.Tensor) -> GemmFn:
        return CublasLt.for_problem(a, b, layout).call(choice)

    def describe(self, problem: Problem, choices: list[str]) -> dict[str, Any]:
        """The heuristic's algorithms, and the reconfigurations as built (or refused: see their entries)."""
        if problem.operands is None:
            return {}
        lt = CublasLt.for_problem(*problem.operands, problem.layout)
        found: dict[str, Any] = {"cublaslt_algorithms": [lt.describe(i) for i in range(len(lt.algorithms))]}
        if any("/" in n for n in choices):
            found["cublaslt_variants"] = {n: lt.describe(n) for n in choices if "/" in n}
        return found

    def table_entry(self, choice: str, record: dict[str, Any]) -> dict[str, Any]:
        """The algorithm as the record describes it, so a table says what its index meant where it was measured."""
        algos = record.get("cublaslt_algorithms") or []
        index, changed = parse_cublaslt(choice)
        if changed and choice in (record.get("cublaslt_variants") or {}):
            return {"cublaslt_algorithm": record["cublaslt_variants"][choice]}
        if index < len(algos):
            return {"cublaslt_algorithm": algos[index]}
        return {}

    def forget(self) -> None:
        CublasLt.forget_all()


FAMILY = CublasLtFamily()
