"""Vet a suite task: does its reference output really depend on its inputs?

`check_degeneracy` runs the task's Model in float64 on a few input seeds and reports outputs
a wrong kernel could match by accident (constant, input-independent, ~zero, NaN/Inf) and
metadata that will not evaluate. It runs task code in this process, so it is for our own
suite, never for candidates; it times nothing and builds no tensors at the gpu preset.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from warpforge.errors import TaskError
from warpforge.evaluate.inputs import KNOWN_DISTS
from warpforge.evaluate.verify import relative_change
from warpforge.task import Task, eval_metadata_expr, import_task_module

MODEL_SEED = 0
FIRST_INPUT_SEED = 1000
# Outputs closer than this (relative L2) for different inputs count as "the same output".
MIN_RELATIVE_CHANGE = 1e-3
# std / mean|x| below this makes an output "near-constant".
MIN_RELATIVE_SPREAD = 1e-3
# Outputs all smaller than this are "all ~zero".
MIN_MAGNITUDE = 1e-6
TINY = 1e-30


def check_degeneracy(task: Task, preset: str = "cpu", seeds: int = 3) -> list[str]:
    """Human-readable problems with `task` at size `preset`; [] when there are none."""
    problems = _metadata_problems(task)
    try:
        module = import_task_module(task, task.sizes(preset))
    except TaskError as exc:
        return problems + [str(exc)]
    problems += _preset_problems(task, module, preset)

    try:
        outputs = _run_float64(module, seeds)
    except Exception as exc:  # task code may raise anything; report it as one line
        return problems + [f"running the model failed: {type(exc).__name__}: {exc}"]
    return problems + _output_problems(outputs)


def _metadata_problems(task: Task) -> list[str]:
    problems: list[str] = []
    sizes = task.metadata.get("sizes") or {}
    problems += [f'WARPFORGE["sizes"] has no {p!r} preset' for p in ("cpu", "gpu") if p not in sizes]
    problems += [f'WARPFORGE has no "{key}"' for key in ("flops", "bytes") if key not in task.metadata]
    unknown = [d for d in task.metadata.get("input_dists", []) if d not in KNOWN_DISTS]
    if unknown:
        problems.append(f"unknown input_dists {unknown}; known: {list(KNOWN_DISTS)}")
    for key in ("atol", "rtol"):
        value = task.metadata.get(key)
        if value is not None and not (isinstance(value, (int, float)) and value > 0):
            problems.append(f'WARPFORGE["{key}"] = {value!r} is not a positive number')
    return problems


def _preset_problems(task: Task, module: Any, preset: str) -> list[str]:
    """Preset names exist, the file's defaults equal the cpu preset, flops/bytes are positive."""
    problems: list[str] = []
    presets = task.metadata.get("sizes") or {}
    for name, sizes in presets.items():
        missing = [key for key in sizes if not hasattr(module, key)]
        if missing:
            problems.append(f"size preset {name!r} sets {missing}, which the task does not define")
    if preset == "cpu":
        defaults = import_task_module(task)
        differing = {k: v for k, v in task.sizes("cpu").items() if getattr(defaults, k, v) != v}
        if differing:
            problems.append(f"the file's own sizes differ from the cpu preset {differing}")
    for name, sizes in presets.items():
        # evaluate the expressions over the preset's globals without building its tensors
        scope = types.SimpleNamespace(**{**vars(module), **sizes})
        for key in ("flops", "bytes"):
            if key not in task.metadata:
                continue
            try:
                value = eval_metadata_expr(task, scope, key)
            except TaskError as exc:
                if str(exc) not in problems:  # the same bad expression fails at every preset
                    problems.append(str(exc))
                continue
            if value is None or not value > 0:
                problems.append(f'WARPFORGE["{key}"] is {value} at the {name!r} preset, not a positive number')
    return problems


def _run_float64(module: Any, seeds: int) -> list[list[Any]]:
    """The outputs of one float64 Model (fixed weights) for `seeds` different input draws."""
    torch.manual_seed(MODEL_SEED)
    model = module.Model(*module.get_init_inputs()).double()
    runs: list[list[Any]] = []
    for seed in range(FIRST_INPUT_SEED, FIRST_INPUT_SEED + seeds):
        torch.manual_seed(seed)
        inputs = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                  for x in module.get_inputs()]
        with torch.no_grad():
            out = model(*inputs)
        runs.append(list(out) if isinstance(out, (tuple, list)) else [out])
    return runs


def _output_problems(runs: list[list[Any]]) -> list[str]:
    first = runs[0]
    bad_types = [type(o).__name__ for o in first if not isinstance(o, torch.Tensor)]
    if not first or bad_types:
        return [f"forward must return a tensor or a tuple of tensors, got {bad_types or 'an empty tuple'}"]
    problems: list[str] = []
    for index in range(len(first)):
        label = "output" if len(first) == 1 else f"output {index}"
        values = [run[index].detach().to(torch.float64) for run in runs]
        problems += _one_output_problems(label, values)
    return problems


def _one_output_problems(label: str, values: list[torch.Tensor]) -> list[str]:
    if any(not torch.isfinite(v).all() for v in values):
        return [f"{label} has NaN or Inf values"]
    problems: list[str] = []
    if all(v.abs().max().item() < MIN_MAGNITUDE for v in values if v.numel()):
        problems.append(f"{label} is all ~zero (every value below {MIN_MAGNITUDE:g})")
    if len(values) > 1:
        changes = [relative_change(values[0], v) for v in values[1:]]
        if min(changes) < MIN_RELATIVE_CHANGE:
            problems.append(f"{label} barely changes with the inputs (relative change {min(changes):.2g} "
                            "between input seeds): it does not depend on them")
    if values[0].numel() > 1:
        spreads = [(v.std() / (v.abs().mean() + TINY)).item() for v in values]
        if min(spreads) < MIN_RELATIVE_SPREAD:
            problems.append(f"{label} is near-constant (std / mean|x| = {min(spreads):.2g})")
    return problems

