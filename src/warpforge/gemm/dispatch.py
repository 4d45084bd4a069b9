"""`warpforge.gemm.matmul(a, b)`: per-shape dispatch from a measured table, falling back to cuBLAS.

A table maps (GPU model, dtype, layout, M, N, K) to a choice (see choices.py). It is built by
`warpforge gemm tune` on the user's GPU (written to the cache folder) or shipped with warpforge
for the GPUs we measured (`gemm/tables/<gpu-slug>.json`). Lookup order: the table named by
WARPFORGE_GEMM_TABLE, the user's cache (~/.cache/warpforge/gemm/<gpu-slug>/table.json), the
shipped table. A table made on another GPU model is never used.

Shapes the table has not measured take the nearest measured bucket (same dtype, layout and
alignment, each of M, N, K within 2x, nearest in log space) when its choice's family hands it on
(`GemmFamily.transferred`: a Triton or mma kernel, padding or a file), and fall back to
torch.matmul otherwise: a cuBLASLt algorithm index is specific to its problem, and a CUTLASS
configuration measured slower than torch.matmul on most held-out shapes it was handed
(cutlass_sm90.py). Since the tuner keeps a kernel only when it beat every baseline beyond noise, a
measured shape is never sent to something slower than torch.matmul. Kernels are reached only
through their families (families.py), never by their names' prefixes.

With WARPFORGE_GEMM_ONLINE=1 (`gemm bench --online`), an unmeasured shape is tuned on first use
instead, among torch.matmul, cuBLASLt's algorithms (the heuristic's list and its first two
reconfigured: split-K, swizzle) and the nearest measured bucket's kernel of our families that
allow it (`GemmFamily.timed_online`: Triton, mma, CUTLASS), timed by the tuner on operands of
its own, about a second once per shape and GPU model. The record is appended to
`<cache>/online/tune.jsonl`, which later processes read back. This is the cheap per-shape
re-resolution of cuBLASLt choices: the heuristic's ranking does not transfer from one shape to
the next (docs/gemm.md), so it is measured on the shape itself.

Inputs the table cannot serve (not CUDA, not fp16/bf16, batched with a non-contiguous a, B in
neither a row-major nor a transposed-row-major layout) go to torch.matmul unchanged. The
dispatched kernels run on the current stream and allocate nothing per call (cuBLASLt is skipped
while a CUDA graph is being captured), so matmul works on side streams and in CUDA graphs;
`torch.ops.warpforge.matmul` is the same as a torch.library custom op, opaque to torch.compile.
"""

from __future__ import annotations

import json
import math
import os
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from warpforge import jsonl
from warpforge.errors import UsageError
from warpforge.gemm import choices, families
from warpforge.gemm.shapes import GemmShape, gpu_slug

_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}


def cache_dir(gpu: str) -> Path:
    root = Path(os.environ.get("WARPFORGE_CACHE", Path.home() / ".cache" / "warpforge"))
    return root / "gemm" / gpu_slug(gpu)


def transferred(choice: str) -> bool:
    """Whether an unmeasured shape takes `choice` from the nearest measured one (see the docstring)."""
    family = families.find(choice)
    return family is not None and family.transferred


class Table:
    def __init__(self, data: dict[str, Any], path: str = "") -> None:
        if not isinstance(data, dict) or "gpu" not in data or not isinstance(data.get("entries"), list):
            raise UsageError(f"{path or 'table'} is not a warpforge GEMM table (needs 'gpu' and a list of 'entries')")
        self.gpu: str = data["gpu"]
        self.path = path
        self.entries: dict[tuple[str, str, int, int, int], str] = {}
        self.fallbacks: dict[tuple[str, str, int, int, int], str] = {}  # what runs where the choice cannot
        self._nearest: dict[tuple[str, str, int, int, int], str | None] = {}  # a scan of every entry, once a shape
        for e in data["entries"]:
            key = (e["dtype"], e["layout"], int(e["M"]), int(e["N"]), int(e["K"]))
            self.entries[key] = e["choice"]
            if e.get("fallback"):
                self.fallbacks[key] = e["fallback"]

    @classmethod
    def load(cls, path: str | Path) -> Table:
        p = Path(path)
        try:
            return cls(json.loads(p.read_text()), str(p))
        except FileNotFoundError:
            raise UsageError(f"GEMM table {p} does not exist: run `warpforge gemm tune` or unset WARPFORGE_GEMM_TABLE") from None
        except json.JSONDecodeError as exc:
            raise UsageError(f"GEMM table {p} is not valid JSON (line {exc.lineno})") from None

    def lookup(self, dtype: str, layout: str, M: int, N: int, K: int) -> tuple[str, str]:
        """(choice, how it was found: "measured", "nearest", "default")."""
        exact = self.entries.get((dtype, layout, M, N, K))
        if exact is not None:
            return exact, "measured"
        near = self.nearest(dtype, layout, M, N, K)
        if near is not None and transferred(near):
            return near, "nearest"
        return "torch", "default"

    def nearest(self, dtype: str, layout: str, M: int, N: int, K: int) -> str | None:
        """The choice of the nearest measured shape of the same dtype, layout and alignment with each of
        M, N, K within 2x (nearest in log space), of whatever kind; None when there is none."""
        key = (dtype, layout, M, N, K)
        if key not in self._nearest:
            self._nearest[key] = self._scan(dtype, layout, M, N, K)
        return self._nearest[key]

    def _scan(self, dtype: str, layout: str, M: int, N: int, K: int) -> str | None:
        aligned = N % 8 == 0 and K % 8 == 0
        best, best_d = None, math.inf
        for (d, lay, m, n, k), choice in self.entries.items():
            if d != dtype or lay != layout or (n % 8 == 0 and k % 8 == 0) != aligned:
                continue
            ratios = (m / M, n / N, k / K)
            if any(r > 2 or r < 0.5 for r in ratios):
                continue
            dist = sum(math.log(r) ** 2 for r in ratios)
            if dist < best_d:
                best, best_d = choice, dist
        return best


_lock = threading.Lock()
_tables: dict[str, Table | None] = {}
_fns: dict[tuple[Any, ...], tuple[str, choices.GemmFn, bool]] = {}  # key -> (what runs, its function, capturable)
ONLINE = "WARPFORGE_GEMM_ONLINE"  # 1: shapes no table serves are tuned on first use (online_choice)
_online_lock = threading.Lock()
_online: dict[str, dict[tuple[str, str, int, int, int], str]] = {}  # GPU model -> shape -> choice


def table_for(device: torch.device) -> Table | None:
    """The table for this device's GPU model, or None (then everything goes to torch.matmul)."""
    gpu = torch.cuda.get_device_name(device)
    with _lock:
        if gpu not in _tables:
            _tables[gpu] = _find_table(gpu)
        return _tables[gpu]


def _find_table(gpu: str) -> Table | None:
    env = os.environ.get("WARPFORGE_GEMM_TABLE")
    if env:
        table = Table.load(env)
        if table.gpu != gpu:
            raise UsageError(f"WARPFORGE_GEMM_TABLE={env} was measured on {table.gpu}, this GPU is {gpu}: "
                             "tune this GPU with `warpforge gemm tune` or unset the variable")
        return table
    user = cache_dir(gpu) / "table.json"
    if user.exists():
        return Table.load(user)
    shipped = resources.files("warpforge.gemm") / "tables" / f"{gpu_slug(gpu)}.json"
    if shipped.is_file():
        return Table(json.loads(shipped.read_text()), str(shipped))
    return None


def forget_kernels() -> None:
    """Forget the resolved kernels (and the cuBLASLt plans and operands they hold), keeping the
    tables: a benchmark over many shapes releases each shape's memory before the next."""
    with _lock:
        _fns.clear()
    families.forget()


def reset() -> None:
    """Forget loaded tables, shapes tuned on first use and resolved kernels (after a new table was written)."""
    with _lock:
        _tables.clear()
        _fns.clear()
    with _online_lock:
        _online.clear()


def online_records(gpu: str) -> Path:
    """Where the shapes tuned on first use are recorded (`gemm tune` records, read back by later processes)."""
    return cache_dir(gpu) / "online" / "tune.jsonl"


def online_enabled() -> bool:
    return os.environ.get(ONLINE, "") not in ("", "0")


def online_choice(device: torch.device, dtype: str, layout: str, M: int, N: int, K: int,
                  neighbour: str | None = None) -> str | None:
    """With WARPFORGE_GEMM_ONLINE=1: this shape's choice among torch.matmul, cuBLASLt's algorithms
    and `neighbour` (the nearest measured shape's kernel, when its family is `timed_online`), tuned
    now if no earlier process recorded it. None when off, or while a CUDA graph is being captured
    (nothing may be timed then; the shape is tuned on a later call)."""
    if not online_enabled() or torch.cuda.is_current_stream_capturing():
        return None
    from warpforge.gemm import tune  # the tuner: only when asked

    gpu = torch.cuda.get_device_name(device)
    key = (dtype, layout, M, N, K)
    with _online_lock:
        known = _online.get(gpu)
        if known is None:
            known = _online[gpu] = {(r["dtype"], r["layout"], int(r["M"]), int(r["N"]), int(r["K"])): r["choice"]
                                    for r in jsonl.read(online_records(gpu)) if r.get("gpu") == gpu and "choice" in r}
        if key not in known:
            try:
                with torch.cuda.device(device):
                    family = families.find(neighbour) if neighbour else None
                    extra = (neighbour,) if neighbour and family and family.timed_online else ()
                    record = tune.tune_shape(GemmShape(M, N, K, dtype, source="online"), layout, "cuda",
                                             tune.TuneSettings(families=(), kernels=extra))
            except (RuntimeError, UsageError):  # e.g. out of memory for the tuner's own operands: not again
                known[key] = "torch"
            else:
                jsonl.append(online_records(gpu), [record])
                known[key] = record["choice"]
        return known[key]


def _layout_of(b: torch.Tensor) -> tuple[str, torch.Tensor] | None:
    """("nn", b) for a row-major (K, N) b; ("nt", W) when b is W.t() of a row-major (N, K) W."""
    if b.is_contiguous():
        return "nn", b
    if b.t().is_contiguous():
        return "nt", b.t()
    return None


def choose(a: torch.Tensor, b: torch.Tensor) -> tuple[str, str]:
    """What matmul(a, b) runs with these operands: (choice, reason). Once matmul has run the shape,
    a choice that could not be made here reads as what ran instead (its fallback or torch)."""
    choice, how, _ = _choose(a, b)
    lay = _layout_of(b)
    hit = _fns.get(_key(a, b, lay[0], choice)) if lay and choice != "torch" else None
    if hit is not None and hit[0] != choice:
        return hit[0], f"{how}; {choice} cannot run here"
    return choice, how


def _key(a: torch.Tensor, b: torch.Tensor, layout: str, choice: str) -> tuple[Any, ...]:
    return (a.device, a.dtype, layout, a.numel() // a.shape[-1], b.shape[1], b.shape[0], choice)


def _choose(a: torch.Tensor, b: torch.Tensor) -> tuple[str, str, str | None]:
    """(choice, reason, the table's fallback for it)."""
    if a.device.type != "cuda" or a.dtype not in _DTYPES or b.dtype != a.dtype or a.dim() < 2 or b.dim() != 2:
        return "torch", "unsupported input (needs CUDA fp16/bf16, b 2-D)", None
    lay = _layout_of(b)
    if lay is None or not a.is_contiguous():
        return "torch", "unsupported layout", None
    table = table_for(a.device)
    M = a.numel() // a.shape[-1]
    K, N = b.shape
    dtype, layout = _DTYPES[a.dtype], lay[0]
    if table is None:
        choice, how = "torch", "no table for this GPU"
    else:
        choice, how = table.lookup(dtype, layout, M, N, K)
        if how == "measured":
            return choice, how, table.fallbacks.get((dtype, layout, M, N, K))
    if online_enabled():
        neighbour = table.nearest(dtype, layout, M, N, K) if table else None
        family = families.find(neighbour) if neighbour else None
        if neighbour and family and not family.ready(neighbour, dtype, layout):
            neighbour = None  # a CUTLASS library not built here: a matmul call does not build it
        online = online_choice(a.device, dtype, layout, M, N, K, neighbour)
        if online is not None:
            return online, "online", None
    return choice, how, None


def _build(choice: str, fallback: str | None, layout: str, a: torch.Tensor, w: torch.Tensor
           ) -> tuple[str, choices.GemmFn, bool] | None:
    """(what runs, its function, whether it may run under CUDA graph capture): the choice, else the
    table's fallback for it (the fastest baseline measured there), else torch.matmul. A choice that
    cannot be made here is passed over: one its family is not `ready` to build (a CUTLASS library
    not built), a cuBLASLt reconfiguration this cuBLASLt or the workspace cap refuses, a candidate
    file gone, a name no family owns. None while a CUDA graph is being captured and a family that
    cannot be captured (cuBLASLt) would be made: no plan is made then, and torch.matmul runs this once."""
    dtype = _DTYPES.get(a.dtype, str(a.dtype))
    for name in (choice, fallback):
        if not name or name == "torch":
            break
        family = families.find(name)
        if family is None:
            continue
        if not family.capturable and torch.cuda.is_current_stream_capturing():
            return None
        if not family.ready(name, dtype, layout):
            continue
        try:
            return name, choices.make_choice(name, layout, a, w), family.capturable
        except UsageError:
            continue
    return "torch", choices.torch_choice(layout), True


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b for a (..., K) and b (K, N), with the fastest measured kernel for this shape on this GPU."""
    choice, _, fallback = _choose(a, b)
    lay = _layout_of(b)
    if choice == "torch" or lay is None:
        return torch.matmul(a, b)
    layout, w = lay
    a2 = a.reshape(-1, a.shape[-1])
    key = _key(a, b, layout, choice)
    hit = _fns.get(key)
    if hit is None:
        with _lock:
            hit = _fns.get(key)
            if hit is None:
                hit = _build(choice, fallback, layout, a2, w)
                if hit is None:
                    return torch.matmul(a, b)
                _fns[key] = hit
    if not hit[2] and torch.cuda.is_current_stream_capturing():
        return torch.matmul(a, b)  # cuBLASLt is skipped under capture (see the module's docstring)
    out = hit[1](a2, w)
    return out.reshape(*a.shape[:-1], b.shape[1])


def _register_op() -> None:
    """torch.ops.warpforge.matmul, a custom op torch.compile treats as one opaque node."""
    lib_op = getattr(getattr(torch, "library", None), "custom_op", None)
    if lib_op is None:  # torch < 2.4
        return

    @lib_op("warpforge::matmul", mutates_args=())
    def _op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = matmul(a, b)
        return out if out.is_contiguous() else out.contiguous()

    @_op.register_fake
    def _(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a.new_empty((*a.shape[:-1], b.shape[1]))


_register_op()
