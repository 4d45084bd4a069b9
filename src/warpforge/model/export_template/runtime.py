"""Verified kernels exported by warpforge (`warpforge model export`), as torch.library custom ops.

Importing this package registers one op per seam, `torch.ops.<NAMESPACE>.<op>(xs, params)`: the
module's activations and its own weights are both inputs (nothing is baked in), so a program that
torch.export saved with these ops runs wherever this package is imported. `apply(model)` gives each
module at a seam's paths its own guarded forward (never a class rebind): a call as verified (the
call's structure and constants, its inputs' shapes and dtypes, the weights' shapes and dtypes, the
device, no gradient wanted) runs the op; any other runs the original forward and is counted as a
fallback. `layers` holds the same guard as Hugging Face `kernels` layers (`kernelize`).
manifest.json holds the evidence, VERIFICATION.md what was checked and what was not. Needs torch only.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ._guard import _build, _matches  # warpforge's own call matcher (model/apply.py), copied at export

HERE = Path(__file__).resolve().parent
DATA: dict[str, Any] = json.loads((HERE / "_seams.json").read_text())
NAMESPACE: str = DATA["namespace"]
SEAMS: dict[str, dict[str, Any]] = {s["seam"]: s for s in DATA["seams"]}
MISSING: Any = object()
"""A parameter that the caller of a `layers` forward did not pass."""

Key = tuple[tuple[tuple[int, ...], ...], tuple[torch.dtype, ...]]


def manifest() -> dict[str, Any]:
    """The evidence behind each kernel: verdicts, speedups, timings, hardware, versions, archive ids."""
    return json.loads((HERE / "manifest.json").read_text())  # type: ignore[no-any-return]


@dataclass
class SeamApplied:
    """One seam: where its kernel went (or why it did not), and how often it ran."""

    seam: str
    op: str
    paths: list[str]
    attempt_id: int
    served: int = 0
    fallbacks: int = 0
    first_fallback: str | None = None
    """Why the first call that fell back did."""
    skipped: str | None = None


@dataclass
class ApplyReport:
    seams: list[SeamApplied] = field(default_factory=list)

    @property
    def applied(self) -> list[SeamApplied]:
        return [s for s in self.seams if s.skipped is None]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)  # type: ignore[no-any-return]


def _key(shapes: Any, dtypes: Any) -> Key:
    return tuple(tuple(int(d) for d in s) for s in shapes), tuple(_dtype(d) for d in dtypes)


VERIFIED: dict[str, set[Key]] = {name: {_key(shapes, s["dtypes"]) for shapes in s["shapes"]} for name, s in SEAMS.items()}
WEIGHTS: dict[str, list[tuple[tuple[int, ...], torch.dtype]]] = {
    name: [(tuple(p["shape"]), _dtype(p["dtype"])) for p in s["params"]] for name, s in SEAMS.items()}
_kernels: dict[tuple[str, str], nn.Module] = {}


def kernel(seam: str, device: torch.device | str) -> nn.Module:
    """The seam's kernel (its ModelNew) on `device`: imported from the shipped source with the
    environment it was built with, constructed once, its own weights replaced at every call."""
    where = torch.device(device)
    if (seam, str(where)) not in _kernels:
        s = SEAMS[seam]
        for name, value in s["build"]["env"].items():
            os.environ.setdefault(name, value)  # e.g. TORCH_CUDA_ARCH_LIST: the architecture it was verified for
        module_name = f"{NAMESPACE}_kernel_{s['op']}"
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, HERE / s["kernel"])
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(module_name, None)
                raise
        built = module.ModelNew(*s["init"]).eval().to(where)
        want = {f"seam.{p['name']}" for p in s["params"]}
        if set(built.state_dict()) != want:
            raise RuntimeError(f"{seam}: the kernel's state {sorted(built.state_dict())} is not the module's {sorted(want)}")
        _kernels[(seam, str(where))] = built
    return _kernels[(seam, str(where))]


def _register(s: dict[str, Any]) -> Any:
    qualname = f"{NAMESPACE}::{s['op']}"
    names = [f"seam.{p['name']}" for p in s["params"]]
    fake = {_key(row["shapes"], row["dtypes"]): [(tuple(shape), _dtype(dtype)) for shape, dtype in row["outputs"]]
            for row in s["fake"]}
    try:
        @torch.library.custom_op(qualname, mutates_args=())  # type: ignore[misc]
        def op(xs: list[torch.Tensor], params: list[torch.Tensor]) -> list[torch.Tensor]:
            module = kernel(s["seam"], xs[0].device)
            with torch.no_grad():
                out = torch.func.functional_call(module, dict(zip(names, params)), tuple(x.contiguous() for x in xs))
            outs = [out] if isinstance(out, torch.Tensor) else list(out)
            given = {t.untyped_storage().data_ptr() for t in [*xs, *params]}
            return [o.clone() if o.untyped_storage().data_ptr() in given else o for o in outs]

        @op.register_fake  # type: ignore[misc]
        def _(xs: list[torch.Tensor], params: list[torch.Tensor]) -> list[torch.Tensor]:
            key = (tuple(tuple(int(d) for d in x.shape) for x in xs), tuple(x.dtype for x in xs))
            if key not in fake:
                raise RuntimeError(f"{qualname} was verified at {sorted(fake)} only, not at {key}")
            return [xs[0].new_empty(shape, dtype=dtype) for shape, dtype in fake[key]]
    except RuntimeError:  # registered already: another copy of this very build (same namespace) is loaded
        return getattr(getattr(torch.ops, NAMESPACE), s["op"]).default
    return op


OPS: dict[str, Any] = {name: _register(s) for name, s in SEAMS.items()}


def _tensor(module: nn.Module, dotted: str) -> torch.Tensor:
    found: Any = module
    for part in dotted.split("."):
        found = getattr(found, part)
    return found  # type: ignore[no-any-return]


def _serve(s: dict[str, Any], module: nn.Module, call: Any, args: tuple[Any, ...],
           kwargs: dict[str, Any]) -> tuple[bool, Any]:
    """(True, the module's output from the op) for a verified call, else (False, why not)."""
    slots: dict[int, torch.Tensor] = {}
    count = len(s["dtypes"])
    if not (_matches(call, args, kwargs, slots) and len(slots) == count):
        return False, "the call's structure or constants differ from the verified call"
    xs = [slots[i] for i in range(count)]
    if (tuple(tuple(x.shape) for x in xs), tuple(x.dtype for x in xs)) not in VERIFIED[s["seam"]]:
        return False, "its input shapes or dtypes are no verified preset"
    params = [_tensor(module, p["name"]) for p in s["params"]]
    if [(tuple(p.shape), p.dtype) for p in params] != WEIGHTS[s["seam"]]:
        return False, "its weights' shapes or dtypes are not the verified module's"
    device = s["device"]
    if not all(t.device.type == device and t.layout == torch.strided for t in [*xs, *params]):
        return False, f"its inputs are not strided tensors on {device}"
    if torch.is_grad_enabled() and any(x.requires_grad for x in xs):
        return False, "it wants gradients (the kernel has no backward)"
    return True, _build(s["output"], OPS[s["seam"]](xs, [p.detach() for p in params]))


def _count(entry: SeamApplied, served: bool, why: Any) -> None:
    if served:
        entry.served += 1
        return
    entry.fallbacks += 1
    if entry.first_fallback is None:
        entry.first_fallback = str(why)


def _entry(s: dict[str, Any]) -> SeamApplied:
    return SeamApplied(s["seam"], f"{NAMESPACE}::{s['op']}", list(s["paths"]), int(s["attempt_id"]))


def apply(model: nn.Module) -> tuple[nn.Module, ApplyReport]:
    """Patch `model` in place (and return it): each module at each seam's paths gets a guarded
    forward that runs the seam's op on verified calls and its original forward on any other."""
    report = ApplyReport()
    for s in DATA["seams"]:
        entry = _entry(s)
        report.seams.append(entry)
        try:
            targets = [model.get_submodule(path) for path in s["paths"]]
        except AttributeError as exc:
            entry.skipped = f"the model has no such module: {exc}"
            continue
        if any(hasattr(t, "_warpforge_original_forward") for t in targets):
            entry.skipped = "its modules are patched already"
            continue
        try:
            kernel(s["seam"], s["device"])  # import and build now: a kernel that cannot run here is reported here
        except Exception as exc:  # the kernel's own code: any failure is its
            entry.skipped = f"the kernel does not load here: {type(exc).__name__}: {exc}"
            continue
        for target in targets:
            _swap(target, s, entry)
    return model, report


def _swap(module: nn.Module, s: dict[str, Any], entry: SeamApplied) -> None:
    original = module.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        served, value = _serve(s, module, s["call"], args, kwargs)
        _count(entry, served, value)
        return value if served else original(*args, **kwargs)

    module._warpforge_original_forward = original  # type: ignore[assignment]
    module.forward = forward  # type: ignore[method-assign]


KERNELIZED = ApplyReport([_entry(s) for s in DATA["seams"]])
"""The calls that went through `layers` (Hugging Face `kernelize`), served and fallen back."""


def _canonical(signature: list[list[str]], named: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A call by parameter name as one (args, kwargs): positional parameters positionally up to the
    first one not passed, the rest by keyword, so that any two ways of passing it compare equal."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    positional = True
    for name, kind in signature:
        value = named.get(name, MISSING)
        if kind == "VAR_POSITIONAL":
            args.extend(value if value is not MISSING else ())
        elif kind == "VAR_KEYWORD":
            kwargs.update(value if value is not MISSING else {})
        elif value is MISSING:
            positional = positional and kind not in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
        elif positional and kind in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD"):
            args.append(value)
        else:
            kwargs[name] = value
    return tuple(args), kwargs


def _layer_call(s: dict[str, Any]) -> Any:
    """The verified call in `_canonical` form (the recorded one names its arguments as the caller
    did), or None when it does not fit the forward's signature (every call then falls back)."""
    if s["signature"] is None:
        return None
    params = [inspect.Parameter(name, getattr(inspect.Parameter, kind),
                                **({} if kind.startswith("VAR_") else {"default": MISSING})) for name, kind in s["signature"]]
    try:
        bound = inspect.Signature(params).bind(*s["call"]["args"], **s["call"]["kwargs"])
    except (TypeError, ValueError):
        return None
    args, kwargs = _canonical(s["signature"], dict(bound.arguments))
    return {"args": list(args), "kwargs": kwargs}


LAYER_CALLS: dict[str, Any] = {name: _layer_call(s) for name, s in SEAMS.items()}


def kernelized(seam: str, module: nn.Module, named: dict[str, Any]) -> Any:
    """The forward of `layers.<seam>`: the op for a verified call, else the class's own forward."""
    s = SEAMS[seam]
    args, kwargs = _canonical(s["signature"], named)
    if LAYER_CALLS[seam] is None:
        served, value = False, "the verified call does not fit the forward's signature"
    else:
        served, value = _serve(s, module, LAYER_CALLS[seam], args, kwargs)
    _count(next(e for e in KERNELIZED.seams if e.seam == seam), served, value)
    return value if served else type(module).forward(module, *args, **kwargs)


from . import layers  # type: ignore[attr-defined]  # noqa: E402  (written at export; Hugging Face `kernels` looks for it here)

__all__ = ["NAMESPACE", "OPS", "ApplyReport", "KERNELIZED", "apply", "kernel", "layers", "manifest"]
