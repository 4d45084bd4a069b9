"""A size preset for a task that brings none: its large integer globals scaled down together.

KernelBench's task files carry one size, sized for a GPU (level 1 up to 6 GiB a tensor), and
no `WARPFORGE["sizes"]`. To evaluate or optimise one on a CPU, the reference process divides
every module-level int of at least MIN_SCALED (batch sizes, channels, lengths, features) by the
same power of two, the smallest that brings one input set, the model's weights and its outputs
within a byte budget; so is each such int inside a tuple or list of ints (`bias_shape = (out_channels, 1, 1)`).
Small ints (kernel sizes, strides, dims, head counts) keep their values. One factor for
all keeps ratios (`hidden = 4 * dim` stays 4x) and divisibility by powers of two. Sizes are
measured by building and running the task on the meta device, so nothing is allocated, and a
factor at which the task no longer builds or runs there (embed_dim no longer divisible by
num_heads) is not used: the largest that still does is. A task that cannot be measured there
keeps its sizes.

Runs task code: only in the reference process, which runs the task anyway.
"""

from __future__ import annotations

from typing import Any

import torch

MIN_SCALED = 16
MAX_FACTOR = 1 << 16
CPU_BYTES = 4 << 20
"""The budget on a CPU: the built-in suite's CPU presets take 1-4 MiB of inputs."""


def fit_globals(module: Any, budget_bytes: int) -> tuple[dict[str, Any], str]:
    """Scale `module`'s large int globals down (in place) until one input set, the model's
    weights and its outputs take at most `budget_bytes`; returns the new values and a note for
    the result ("" when nothing changed)."""
    original = {name: value for name, value in vars(module).items() if not name.startswith("_") and _scalable(value)}
    if not original:
        return {}, ""
    before = _footprint(module)
    if before is None:
        return {}, ("the task has no size preset for this device and could not be measured on the meta device "
                    "(it does not build or run there): it runs at its own sizes")
    if before <= budget_bytes:
        return {}, ""
    factor, size = 1, before
    while size > budget_bytes and factor < MAX_FACTOR:
        _scale(module, original, factor * 2)
        smaller = _footprint(module)
        if smaller is None:  # the task no longer builds or runs at this factor: keep the last that did
            break
        factor, size = factor * 2, smaller
    _scale(module, original, factor)
    if factor == 1:
        return {}, ("the task has no size preset for this device and could not be scaled down (it does not build "
                    f"or run at smaller sizes on the meta device): it runs at its own sizes, {before / 2**20:.1f} MiB "
                    "of inputs, weights and outputs")
    scaled = {name: getattr(module, name) for name in original}
    changes = ", ".join(f"{name} {original[name]}->{scaled[name]}" for name in original)
    return scaled, (f"the task has no size preset for this device: its large int globals were divided by {factor} "
                    f"({changes}); inputs, weights and outputs {before / 2**20:.1f} -> {size / 2**20:.2f} MiB")


def _scalable(value: Any) -> bool:
    """An int of at least MIN_SCALED, or a tuple or list of ints holding one (a shape)."""
    if type(value) is int:
        return value >= MIN_SCALED
    return type(value) in (tuple, list) and bool(value) and all(type(v) is int for v in value) \
        and max(value) >= MIN_SCALED


def _scaled(value: Any, factor: int) -> Any:
    if type(value) is int:
        return max(value // factor, 1) if value >= MIN_SCALED else value
    return type(value)(_scaled(v, factor) for v in value)


def _scale(module: Any, original: dict[str, Any], factor: int) -> None:
    for name, value in original.items():
        setattr(module, name, _scaled(value, factor))


def _footprint(module: Any) -> int | None:
    """Bytes of one input set, the model's parameters and buffers, and its outputs, built and run
    on the meta device (an operator with no meta kernel leaves the outputs uncounted); None when
    the task does not build or run there."""
    try:
        with torch.device("meta"):
            init = list(module.get_init_inputs())
            inputs = list(module.get_inputs())
            model = module.Model(*init)
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)] + list(model.parameters()) + list(model.buffers())
        try:
            with torch.no_grad():
                out = model(*inputs)
            tensors += [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]
        except NotImplementedError:
            pass
    except Exception:
        return None
    return sum(t.numel() * t.element_size() for t in tensors)
