"""The task probe: a task's input and output shapes, dtypes and work at one size preset, and the
rest of what get_task tells an agent about a task (tolerance policy, candidate rules, roofline).

`probe(task, device, size)` runs `python -m warpforge.agent.probe SPEC.json` as a sandboxed child
with the candidates' allow-listed environment (no keys or tokens), so the agent server never runs
task code itself. The child builds the inputs and runs the reference on PyTorch's meta device,
which yields shapes and dtypes without memory or arithmetic; a task with an op that has no meta
kernel is run for real on the CPU instead, within the time limit. It also evaluates the task's
FLOP and byte expressions, the default tolerance of each output and the hardware fingerprint. It
times nothing (the evaluator does) and caches nothing (the caller does).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warpforge import languages, metrics
from warpforge.errors import HarnessError, TaskError
from warpforge.evaluate.static import allowed_imports
from warpforge.task import Task

PROBE_TIMEOUT_S = 120.0
"""Import, init and one forward at GPU sizes on the CPU fallback; most tasks answer in 2-3 s (meta)."""
PROBE_MEM_LIMIT_MB = 16 * 1024

TOLERANCE_POLICY = (
    "Each output is compared with a float64 reference on fresh random inputs in every trial (and on the timed "
    "calls): the relative L2 error must be at most rel_l2 and the largest error at most max_rel of the output's "
    "largest magnitude; integer outputs must match exactly, NaN/Inf only where the reference has them. Each bound "
    "is widened to 4x the error of the task's own program in its native dtype, measured per evaluation, so the "
    "verdict's `tolerance` can be a little looser than shown here; computing an fp32 task in bf16/fp16/TF32 fails.")


def candidate_rules() -> dict[str, Any]:
    """What a candidate may be: its contract, the registered kernel languages, the import allow-list."""
    titles = [lang.title for lang in languages.ALL]
    return {
        "contract": "a Python source defining class ModelNew(nn.Module) whose __init__ takes what get_init_inputs() "
                    "returns and whose forward takes what get_inputs() returns, with the same outputs (shape, dtype) "
                    "as Model within the tolerance",
        "languages": f"{', '.join(titles[:-1])}, or {titles[-1]}; the verdict's kernels.kind tells custom_kernel from "
                     "pytorch_rewrite",
        "allowed_imports": sorted(allowed_imports()),
        "refused": "threads, processes, side CUDA streams, file access, patching timers or the harness, dynamic code "
                   "execution; outputs are checked on fresh inputs and on timed calls, so cached results are caught",
    }


@dataclass(frozen=True)
class TaskProbe:
    init_inputs: list[Any]
    inputs: list[Any] | None
    """One description per get_inputs() item: {"shape", "dtype"} for tensors, {"value"} for numbers."""
    outputs: list[Any] | None
    tolerances: list[dict[str, float]] | None
    flops: float | None
    bytes: float | None
    hardware: dict[str, Any]
    notes: tuple[str, ...] = field(default=())


def probe(task: Task, device: str, size: str, allow_tf32: bool = False) -> TaskProbe:
    """Shapes, dtypes, tolerances, work and hardware of `task` at size preset `size` on `device`.
    TaskError when the task cannot be built; HarnessError when the probe itself dies."""
    from warpforge.evaluate import jail
    from warpforge.evaluate.sandbox import run_child

    workdir = Path(tempfile.mkdtemp(prefix="warpforge-probe-"))
    try:
        spec = workdir / "spec.json"
        spec.write_text(json.dumps({"task_path": str(task.path), "sizes": task.sizes(size), "device": device,
                                    "allow_tf32": allow_tf32}))
        env = jail.environment()  # the candidates' allow-list: task code sees no keys or tokens
        if device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        outcome = run_child("warpforge.agent.probe", [str(spec)], timeout_s=PROBE_TIMEOUT_S,
                            mem_limit_mb=PROBE_MEM_LIMIT_MB, output_limit_bytes=32 << 10, env=env, cwd=str(workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    by_type = {m["type"]: m for m in outcome.messages}
    if "task_error" in by_type:
        raise TaskError(by_type["task_error"]["message"])
    if "work" not in by_type:
        why = f"timed out after {PROBE_TIMEOUT_S:g} s" if outcome.timed_out else f"exited with {outcome.returncode}"
        raise HarnessError(f"the shape probe for task {task.name} {why}: {outcome.output[-500:].strip() or 'no output'}")
    work, inputs, outputs = by_type["work"], by_type.get("inputs"), by_type.get("outputs")
    notes = [m["message"] for m in outcome.messages if m["type"] == "note"]
    if outputs is None:
        notes.append("output shapes unknown: " + ("the probe timed out" if outcome.timed_out else
                                                  "the reference could not run on the meta device or the CPU"))
    return TaskProbe(init_inputs=work["init_inputs"], inputs=inputs["inputs"] if inputs else None,
                     outputs=outputs["outputs"] if outputs else None,
                     tolerances=outputs["tolerances"] if outputs else None, flops=work["flops"], bytes=work["bytes"],
                     hardware=work["hardware"], notes=tuple(notes))


def roofline(found: TaskProbe, device: str, allow_tf32: bool) -> dict[str, Any]:
    """The speed-of-light time from the task's declared work and this GPU's datasheet peaks."""
    info: dict[str, Any] = {"flops": found.flops, "bytes": found.bytes, "floor_ms": None}
    gpu = str(found.hardware.get("gpu") or "")
    peaks = metrics.peaks_for(gpu) if device == "cuda" else None
    if peaks is None:
        info["note"] = "no datasheet peaks for this device" if device == "cuda" else "no speed-of-light estimate on the CPU"
        return info
    first = (found.outputs or [{}])[0]
    try:
        peak_flops: float | None = metrics.peak_flops_for_dtype(peaks, str(first.get("dtype", "float32")), allow_tf32)
    except ValueError:
        peak_flops = None
    info.update(peak_flops=peak_flops, peak_bytes_per_s=peaks.get("bytes_per_s"),
                floor_ms=metrics.roofline_ms(found.flops, found.bytes, peak_flops, peaks.get("bytes_per_s")))
    return info



# -- the child ---------------------------------------------------------------------------------


def _describe(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return {"shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch.")}
    if isinstance(x, (bool, int, float, str)) or x is None:
        return {"value": x}
    if isinstance(x, (list, tuple)):
        return {"items": [_describe(v) for v in x]}
    return {"type": type(x).__name__}


def main(spec_path: str) -> None:
    import torch

    from warpforge.evaluate import hardware
    from warpforge.evaluate.inputs import split_outputs
    from warpforge.evaluate.sandbox import Channel, die_with_parent
    from warpforge.evaluate.verify import tolerance_for
    from warpforge.task import eval_metadata_expr, import_task_module, load_task

    die_with_parent()
    channel = Channel()
    spec = json.loads(Path(spec_path).read_text())
    try:
        task = load_task(spec["task_path"])
        module = import_task_module(task, spec["sizes"])
        init_inputs = list(module.get_init_inputs())
        flops, nbytes = eval_metadata_expr(task, module, "flops"), eval_metadata_expr(task, module, "bytes")
    except TaskError as exc:
        channel.send("task_error", message=str(exc))
        return
    except Exception as exc:  # task code may raise anything; it becomes one sentence
        channel.send("task_error", message=f"task {spec['task_path']} failed to build: {type(exc).__name__}: {exc}")
        return
    channel.send("work", flops=flops, bytes=nbytes, init_inputs=[_describe(x) for x in init_inputs],
                 hardware=hardware.fingerprint(spec["device"]))
    for where in ("meta", "cpu"):
        try:
            with torch.device(where):
                inputs = module.get_inputs()
            channel.send("inputs", inputs=[_describe(x) for x in inputs])
            with torch.device(where), torch.no_grad():
                outputs = split_outputs(module.Model(*init_inputs)(*inputs))
        except Exception as exc:  # no meta kernel for some op (or a task that insists on a device)
            channel.send("note", message=f"the reference did not run on the {where} device "
                                         f"({type(exc).__name__}: {str(exc)[:200]})")
            continue
        tolerances = [tolerance_for(o.dtype, task.metadata, bool(spec["allow_tf32"])).to_dict()
                      if isinstance(o, torch.Tensor) else None for o in outputs]
        channel.send("outputs", outputs=[_describe(o) for o in outputs], tolerances=tolerances)
        break
    channel.send("done")


if __name__ == "__main__":
    from warpforge.evaluate import debug

    main(sys.argv[1])
    debug.exit_now()
