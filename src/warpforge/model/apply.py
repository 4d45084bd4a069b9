"""`warpforge.apply(model, archive, seams_json)`: the archive's best verified kernel of each
extracted seam, patched into the model's own module instances.

For each task of seams.json, the kernel is the best *trusted* attempt of that task (archive_trust:
an imported attempt is a claim, never applied): `archive.best_attempt` among the correct, timed
ones, else the latest correct one evaluated without timing (reported as not timed). The archive
must hold the very program of the task file (`tasks.source`), or its verdicts are about another
task. The kernel's `ModelNew` is built with the task's `get_init_inputs()` and given each module's
own state (the task's Model holds the module as `self.seam`; its tensors are shared, not copied),
and is called inside a `torch.library.custom_op` (`warpforge_model::<seam>_<n>`) whose fake
implementation gives the output shapes that the module's own forward gives under FakeTensorMode
at each verified input signature.

Each module at the seam's paths gets a per-instance forward (never a class rebind): a call with
the structure and constants of seams.json's `call`, its tensors at a verified shape set (a size
preset of the task), the task's dtypes, the device the kernel was evaluated on, strided, and no
gradient wanted, runs the op and rebuilds the module's `output`; any other call runs the
original forward and counts a fallback. The report counts both, live.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from warpforge.archive import Archive, Attempt, best_attempt
from warpforge.archive_trust import trusted
from warpforge.errors import UsageError, WarpforgeError
from warpforge.model.extract import _rebuild
from warpforge.model.taskfile import snake
from warpforge.task import import_task_module, load_task

NAMESPACE = "warpforge_model"
_ops = itertools.count()
_kernel_dir: Path | None = None


@dataclass
class SeamApplied:
    """One seam: the kernel applied (or why none was), where, and how often it ran."""

    seam: str
    task: str
    paths: list[str]
    attempt_id: int | None = None
    speedup: float | None = None
    """The attempt's speedup over eager PyTorch; None when it was evaluated without timing."""
    device: str | None = None
    """The device the kernel was evaluated on: calls elsewhere fall back."""
    op: str | None = None
    shapes: list[list[list[int]]] = field(default_factory=list)
    """The verified input shape sets (one per size preset of the task)."""
    served: int = 0
    fallbacks: int = 0
    first_fallback: str | None = None
    """Why the first call that fell back did."""
    skipped: str | None = None


@dataclass
class ApplyReport:
    archive: str
    seams_json: str
    seams: list[SeamApplied]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @property
    def applied(self) -> list[SeamApplied]:
        return [s for s in self.seams if s.skipped is None]


def apply(model: nn.Module, archive_path: str | Path, seams_json: str | Path) -> tuple[nn.Module, ApplyReport]:
    """Patch `model` in place (and return it) with the verified kernels of seams.json's tasks."""
    seams_path = Path(seams_json)
    try:
        seams = json.loads(seams_path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {seams_path}: {exc}; give the seams.json that `warpforge model extract` wrote") from None
    if not Path(archive_path).exists():
        raise UsageError(f"no archive at {archive_path}")
    report = ApplyReport(str(archive_path), str(seams_path), [])
    with Archive(archive_path, read_only=True) as archive:
        for row in seams.get("tasks", []):
            entry = SeamApplied(row["seam"], row["task"], list(row["paths"]))
            report.seams.append(entry)
            try:
                _apply_seam(model, archive, seams_path.parent / row["task"], row, entry)
            except _Skip as exc:
                entry.skipped = str(exc)
    return model, report


class _Skip(WarpforgeError):
    """Why a seam is left as it is (one sentence, in the report)."""


def choose(archive: Archive, task: str) -> Attempt | None:
    """The kernel to apply: the best trusted timed attempt, else the latest trusted correct one."""
    pool = [a for a in trusted(archive, archive.attempts(task=task)) if a.correct and a.source]
    return best_attempt(pool) or max(pool, key=lambda a: a.id, default=None)


def _apply_seam(model: nn.Module, archive: Archive, task_file: Path, row: dict[str, Any], entry: SeamApplied) -> None:
    try:
        task = load_task(task_file)
    except Exception as exc:
        raise _Skip(f"cannot load its task {task_file}: {exc}") from None
    entry.task = task.name
    recorded = archive.task_source(task.name)
    if recorded is None:
        raise _Skip(f"the archive has no task {task.name!r}: nothing was verified against it")
    if recorded != task.source:
        raise _Skip(f"the archive's task {task.name!r} is another program than {task_file}: its verdicts do not hold here")
    attempt = choose(archive, task.name)
    if attempt is None or attempt.source is None:
        raise _Skip(f"no verified kernel for {task.name} in the archive (imported attempts count only once verified)")
    entry.attempt_id, entry.speedup = attempt.id, attempt.speedup if attempt.timed else None
    entry.device = str((attempt.hardware or {}).get("device") or "cpu")
    module = import_task_module(task)
    dtypes = tuple(module.DTYPES)
    presets = task.metadata.get("sizes") or {}
    shape_sets = sorted({tuple(tuple(s) for s in p["SHAPES"]) for p in presets.values()})
    entry.shapes = [[list(s) for s in shapes] for shapes in shape_sets]
    kernel_class = _load_kernel(attempt)
    init = list(module.get_init_inputs())
    instances: list[nn.Module] = []
    for path in row["paths"]:
        try:
            target = model.get_submodule(path)
        except AttributeError:
            raise _Skip(f"the model has no module {path}") from None
        if hasattr(target, "_warpforge_original_forward"):
            raise _Skip(f"{path} is patched already")
        kernel = kernel_class(*init)
        state = {f"seam.{k}": v for k, v in target.state_dict(keep_vars=True).items()}
        try:
            kernel.load_state_dict(state, strict=True, assign=True)
        except RuntimeError as exc:
            raise _Skip(f"the kernel's state does not take {path}'s: {str(exc).splitlines()[0]}") from None
        instances.append(kernel.eval())
    op = _make_op(row["seam"], instances, _fake_outputs(model.get_submodule(row["paths"][0]), row["call"],
                                                        shape_sets, dtypes, entry.device))
    entry.op = str(op._qualname)
    signatures = {(shapes, dtypes) for shapes in shape_sets}
    for i, path in enumerate(row["paths"]):
        _swap(model.get_submodule(path), i, op, row["call"], row["output"], signatures, entry)


def _load_kernel(attempt: Attempt) -> type[nn.Module]:
    """The attempt's ModelNew, imported from a file (Triton's JIT reads its kernels' source)."""
    global _kernel_dir
    if _kernel_dir is None:
        _kernel_dir = Path(tempfile.mkdtemp(prefix="warpforge_kernels_"))
    name = f"warpforge_kernel_{attempt.id}_{attempt.source_hash or 'x'}"
    name = re.sub(r"\W", "_", name)
    file = _kernel_dir / f"{name}.py"
    file.write_text(attempt.source or "")
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise _Skip(f"kernel #{attempt.id} does not import here: {type(exc).__name__}: {exc}") from None
    kernel = getattr(mod, "ModelNew", None)
    if not isinstance(kernel, type) or not issubclass(kernel, nn.Module):
        raise _Skip(f"kernel #{attempt.id} defines no ModelNew module")
    return kernel


Signature = tuple[tuple[tuple[int, ...], ...], tuple[torch.dtype, ...]]


def _fake_outputs(original: nn.Module, call: Any, shape_sets: list[tuple[tuple[int, ...], ...]],
                  dtypes: tuple[torch.dtype, ...], device: str) -> dict[Signature, list[tuple[tuple[int, ...], torch.dtype]]]:
    """The module's output shapes and dtypes at each verified signature, from its own forward
    run under FakeTensorMode (no arithmetic, no memory)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from warpforge.model.capture import template

    found: dict[Signature, list[tuple[tuple[int, ...], torch.dtype]]] = {}
    for shapes in shape_sets:
        with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
            fakes = [torch.empty(s, dtype=d, device=device) for s, d in zip(shapes, dtypes)]
            args = [_rebuild(a, fakes, device) for a in call["args"]]
            kwargs = {k: _rebuild(v, fakes, device) for k, v in call["kwargs"].items()}
            outs: list[torch.Tensor] = []
            template(original.forward(*args, **kwargs), outs)
            found[(shapes, dtypes)] = [(tuple(t.shape), t.dtype) for t in outs]
    return found


def _make_op(seam: str, kernels: list[nn.Module],
             fake: dict[Signature, list[tuple[tuple[int, ...], torch.dtype]]]) -> Any:
    name = f"{NAMESPACE}::{snake(seam)}_{next(_ops)}"

    @torch.library.custom_op(name, mutates_args=())  # type: ignore[misc]
    def op(xs: list[torch.Tensor], instance: int) -> list[torch.Tensor]:
        with torch.no_grad():
            out = kernels[instance](*[x.contiguous() for x in xs])
        outs = [out] if isinstance(out, torch.Tensor) else list(out)
        given = {x.untyped_storage().data_ptr() for x in xs}
        return [o.clone() if o.untyped_storage().data_ptr() in given else o for o in outs]

    @op.register_fake  # type: ignore[misc]
    def _(xs: list[torch.Tensor], instance: int) -> list[torch.Tensor]:
        key = (tuple(tuple(int(d) for d in x.shape) for x in xs), tuple(x.dtype for x in xs))
        return [xs[0].new_empty(shape, dtype=dtype) for shape, dtype in fake[key]]

    return op


def _swap(module: nn.Module, instance: int, op: Any, call: Any, output: Any, signatures: set[Signature],
          entry: SeamApplied) -> None:
    original = module.forward
    device = entry.device
    count = len(next(iter(signatures))[0])

    def forward(*args: Any, **kwargs: Any) -> Any:
        slots: dict[int, torch.Tensor] = {}
        if not (_matches(call, args, kwargs, slots) and len(slots) == count):
            why = "the call's structure or constants differ from the verified call"
        else:
            xs = [slots[i] for i in range(count)]
            key = (tuple(tuple(x.shape) for x in xs), tuple(x.dtype for x in xs))
            if key not in signatures:
                why = "its input shapes or dtypes are no verified preset"
            elif not all(x.device.type == device and x.layout == torch.strided for x in xs):
                why = f"its inputs are not strided tensors on {device}"
            elif torch.is_grad_enabled() and any(x.requires_grad for x in xs):
                why = "it wants gradients (the kernel has no backward)"
            else:
                entry.served += 1
                return _build(output, op(xs, instance))
        entry.fallbacks += 1
        if entry.first_fallback is None:
            entry.first_fallback = why
        return original(*args, **kwargs)

    module._warpforge_original_forward = original  # type: ignore[assignment]
    module.forward = forward  # type: ignore[method-assign]


def _matches(call: Any, args: tuple[Any, ...], kwargs: dict[str, Any], slots: dict[int, torch.Tensor]) -> bool:
    want_args, want_kwargs = call["args"], call["kwargs"]
    if len(args) != len(want_args) or set(kwargs) != set(want_kwargs):
        return False
    return (all(_match(n, v, slots) for n, v in zip(want_args, args))
            and all(_match(n, kwargs[k], slots) for k, n in want_kwargs.items()))


def _match(node: Any, value: Any, slots: dict[int, torch.Tensor]) -> bool:
    """Does `value` have the captured structure `node` (capture.template), constants equal?"""
    if "tensor" in node:
        if not isinstance(value, torch.Tensor):
            return False
        slots[node["tensor"]] = value
        return True
    if "const" in node:
        want = node["const"]
        return value is None if want is None else (type(value) is type(want) and value == want)
    if "dtype" in node:
        return bool(value == getattr(torch, node["dtype"]))
    for key in ("tuple", "list"):
        if key in node:
            items = node[key]
            return (isinstance(value, (tuple, list)) and len(value) == len(items)
                    and all(_match(n, v, slots) for n, v in zip(items, value)))
    if "dict" in node:
        items = node["dict"]
        return (isinstance(value, dict) and set(value) == set(items)
                and all(_match(n, value[k], slots) for k, n in items.items()))
    return False


def _build(output: Any, outs: list[torch.Tensor]) -> Any:
    """The module's returned structure, its tensors taken from the kernel's outputs in order."""
    if "tensor" in output:
        return outs[output["tensor"]]
    if "const" in output:
        return output["const"]
    if "dtype" in output:
        return getattr(torch, output["dtype"])
    if "tuple" in output:
        return tuple(_build(x, outs) for x in output["tuple"])
    if "list" in output:
        return [_build(x, outs) for x in output["list"]]
    return {k: _build(v, outs) for k, v in output["dict"].items()}
