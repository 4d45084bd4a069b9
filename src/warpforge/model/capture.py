"""What one forward of a model does, module by module: forward hooks on every module record each
module's first call (the call's structure with its tensors as numbered slots, their shapes,
dtypes and statistics, the output's structure), how often it ran, its FLOPs (torch's
FlopCounterMode) and the bytes it must move; `export_ops` asks torch.export(strict=False) for the
graph and counts each module's ATen ops from the nodes' nn_module_stack. Hooks are what every
model allows (the fallback the issue names); export adds the op lists and says whether the model
exports at all. It times nothing (profile.py does) and writes no file.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str
    mean: float | None = None
    """Floats: the mean; booleans: the fraction that is true; integers: None."""
    std: float | None = None
    low: float | None = None
    high: float | None = None

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=getattr(torch, self.dtype)).element_size()

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "mean": self.mean, "std": self.std,
                "low": self.low, "high": self.high}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> TensorInfo:
        return TensorInfo(tuple(d["shape"]), d["dtype"], d.get("mean"), d.get("std"), d.get("low"), d.get("high"))


@dataclass
class Call:
    """A module's first call in one forward."""

    path: str
    module: nn.Module
    call: Any
    """{"args": [...], "kwargs": {...}}, each tensor a {"tensor": i} slot into `inputs` (see `template`)."""
    inputs: list[TensorInfo]
    output: Any = None
    outputs: list[TensorInfo] = field(default_factory=list)
    count: int = 1
    flops: float = 0.0
    """FLOPs of one call (FlopCounterMode: matmuls, convolutions, attention; elementwise work is not counted)."""
    kept: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
    """The call's input and output tensors themselves, when asked for (extract checks a rebuilt module on them)."""

    @property
    def qualname(self) -> str:
        cls = type(self.module)
        return f"{cls.__module__}.{cls.__qualname__}"

    @property
    def state_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.module.parameters(), *self.module.buffers()))

    @property
    def bytes(self) -> int:
        """The fewest bytes one call must move: its inputs and outputs once, its weights and buffers once."""
        return sum(t.nbytes for t in (*self.inputs, *self.outputs)) + self.state_bytes


def template(value: Any, tensors: list[torch.Tensor]) -> Any:
    """A JSON-able picture of a call's arguments or a module's output: tensors become {"tensor": i}
    (appended to `tensors`), constants {"const": v}, containers {"tuple"|"list"|"dict": ...};
    anything else {"opaque": type name}, which extract cannot write as a task input."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return {"tensor": len(tensors) - 1}
    if value is None or isinstance(value, bool | int | str) or isinstance(value, float) and math.isfinite(value):
        return {"const": value}
    if isinstance(value, tuple | list):
        return {type(value).__name__ if type(value) in (tuple, list) else "tuple": [template(v, tensors) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: template(v, tensors) for k, v in value.items()}}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    return {"opaque": type(value).__name__}


def info(x: torch.Tensor) -> TensorInfo:
    """Shape, dtype and the statistics extract draws a task's inputs from (one device sync)."""
    dtype = str(x.dtype).removeprefix("torch.")
    if x.numel() == 0:
        return TensorInfo(tuple(x.shape), dtype)
    with torch.no_grad():
        if x.dtype == torch.bool:
            return TensorInfo(tuple(x.shape), dtype, mean=float(x.float().mean()))
        if not x.is_floating_point():
            low, high = torch.stack([x.min(), x.max()]).tolist()
            return TensorInfo(tuple(x.shape), dtype, low=float(low), high=float(high))
        w = x.detach().double()
        finite = w[torch.isfinite(w)]
        if finite.numel() == 0:
            return TensorInfo(tuple(x.shape), dtype)
        std = finite.std() if finite.numel() > 1 else torch.zeros((), dtype=torch.float64, device=w.device)
        mean, sd, low, high = torch.stack([finite.mean(), std, finite.min(), finite.max()]).tolist()
        return TensorInfo(tuple(x.shape), dtype, mean, sd, low, high)


def heights(model: nn.Module) -> dict[str, int]:
    """Path -> the module's height in the module tree (0 for a leaf, 1 for a module of leaves, ...)."""
    found: dict[str, int] = {}

    def visit(path: str, module: nn.Module) -> int:
        h = 1 + max((visit(f"{path}.{n}" if path else n, c) for n, c in module.named_children()), default=-1)
        found.setdefault(path, h)
        return h

    visit("", model)
    return found


def capture(model: nn.Module, args: list[Any], kwargs: dict[str, Any],
            keep: frozenset[str] | set[str] = frozenset()) -> dict[str, Call]:
    """Run one forward and return each called module's first `Call` by path ("" is the model)."""
    from torch.utils.flop_counter import FlopCounterMode

    paths = {id(m): name for name, m in model.named_modules()}
    calls: dict[str, Call] = {}

    def before(module: nn.Module, margs: tuple[Any, ...], mkwargs: dict[str, Any]) -> None:
        path = paths.get(id(module))
        if path is None:
            return
        if path in calls:
            calls[path].count += 1
            return
        tensors: list[torch.Tensor] = []
        shape = {"args": template(list(margs), tensors)["list"], "kwargs": template(dict(mkwargs), tensors)["dict"]}
        kept: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
        if path in keep:
            kept = ([t.detach().clone() for t in tensors], [])
        calls[path] = Call(path, module, shape, [info(t) for t in tensors], kept=kept)

    def after(module: nn.Module, margs: tuple[Any, ...], mkwargs: dict[str, Any], output: Any) -> None:
        path = paths.get(id(module))
        call = calls.get(path) if path is not None else None
        if call is None or call.count > 1:
            return
        tensors: list[torch.Tensor] = []
        call.output = template(output, tensors)
        call.outputs = [info(t) for t in tensors]
        if call.kept is not None:
            call.kept[1].extend(t.detach().clone() for t in tensors)

    handles = []
    for module in model.modules():
        handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(module.register_forward_hook(after, with_kwargs=True))
    counter = FlopCounterMode(display=False)
    try:
        with torch.no_grad(), counter:
            model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    root = type(model).__name__
    for key, ops in counter.get_flop_counts().items():
        # FlopCounterMode names a module "<RootClass>.<path>" and the model "<RootClass>"
        path = "" if key == root else key.removeprefix(root + ".") if key.startswith(root + ".") else None
        if path is not None and path in calls:
            calls[path].flops = sum(ops.values()) / calls[path].count
    return calls


@dataclass(frozen=True)
class Exported:
    ok: bool
    error: str | None = None
    ops: dict[str, dict[str, int]] = field(default_factory=dict)
    """Module path -> ATen op -> count, from the exported graph (nodes of the module itself, not its children)."""

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "error": self.error}


def export_ops(model: nn.Module, args: list[Any], kwargs: dict[str, Any]) -> Exported:
    """torch.export(strict=False) of one forward; each call_function node counted under the
    innermost module of its nn_module_stack. A model that does not export is a result, not an error."""
    try:
        program = torch.export.export(model, tuple(args), kwargs, strict=False)
    except Exception as exc:  # any library's failure to trace is the finding itself
        text = str(exc).strip().splitlines()
        return Exported(False, f"{type(exc).__name__}: {text[0] if text else ''}"[:400])
    ops: dict[str, Counter[str]] = {}
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        stack = node.meta.get("nn_module_stack") or {}
        path = _export_path(list(stack.values())[-1][0]) if stack else ""
        ops.setdefault(path, Counter())[str(node.target).removeprefix("aten.")] += 1
    return Exported(True, None, {p: dict(c) for p, c in ops.items()})


def _export_path(fqn: str) -> str:
    """torch.export writes a module's path with its list indices as attributes (`layers.0` or
    `layers[0]` across versions, sometimes prefixed `L['self']`): the named_modules path."""
    path = fqn.replace("L['self'].", "").replace("L['self']", "")
    for ch in "[]":
        path = path.replace(ch, "." if ch == "[" else "")
    return path.replace("..", ".").strip(".")
