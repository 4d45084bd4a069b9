"""A module's mutable state, snapshotted once and put back before every call.

Some tasks change their module on every call: KernelBench's RNN tasks keep `self.hidden` and
replace it in forward, so the tenth call answers differently from the first. The reference
process and the candidate's process each restore their own module's buffers and plain tensor
attributes before every call (verification, timing, baselines), so both see the same history:
each call is the first. Parameters are not restored (a forward that rewrites its own weights
in place is out of scope), nor is state held in anything but tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Saved:
    """One tensor of a module's state: where it lives and its value at the snapshot."""

    module: torch.nn.Module
    name: str
    value: torch.Tensor
    buffer: bool


def snapshot(model: torch.nn.Module) -> list[Saved]:
    """Copies of every buffer and plain tensor attribute of `model` and its submodules."""
    saved = []
    for module in model.modules():
        for name, value in vars(module).items():
            if type(value) is torch.Tensor:  # a plain tensor attribute (parameters and buffers live in dicts)
                saved.append(Saved(module, name, value.detach().clone(), False))
        for name, value in module._buffers.items():
            if value is not None:
                saved.append(Saved(module, name, value.detach().clone(), True))
    return saved


def restore(saved: list[Saved]) -> None:
    """Put every saved tensor back: buffers in place, attributes as fresh copies (a forward may
    mutate what it finds, and the snapshot must stay as it was)."""
    with torch.no_grad():
        for item in saved:
            current = item.module._buffers.get(item.name) if item.buffer else vars(item.module).get(item.name)
            if item.buffer and current is not None and current.shape == item.value.shape:
                current.copy_(item.value)
            elif item.buffer:
                item.module._buffers[item.name] = item.value.clone()
            else:
                setattr(item.module, item.name, item.value.clone())
