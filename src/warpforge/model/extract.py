"""`warpforge model extract`: a KernelBench-format task for each of the top LLM seams of a profile,
plus seams.json (which task stands for which module paths, and how a kernel is to be rebound
there) and gemm_shapes.json (the GEMM seams' shapes, for `warpforge gemm tune --shapes`).

Each task is written by inline.py and taskfile.py and checked before it is kept: the static
pre-filter must accept it as its own candidate (so that A/A can pass), its module, given the
model's weights, must reproduce the model's own output on the activations captured at the
"cpu" preset, and its inputs drawn at every preset must run through it as through the model's
module (on the CPU, presets whose call counts more than VERIFY_CPU_FLOPS are left unchecked and
listed). A seam that fails any of this is skipped with the reason, and the next one in rank is
taken, until `top` tasks are written.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from warpforge.errors import UsageError
from warpforge.model import build as builder
from warpforge.model.capture import Call, TensorInfo, capture, template
from warpforge.model.inline import NotWritable, Writer
from warpforge.model.seams import pooled
from warpforge.model.spec import Spec
from warpforge.model.taskfile import Preset, input_names, output_paths, render, snake

VERIFY_CPU_FLOPS = 2e9
"""A preset is checked on the CPU when one call counts fewer FLOPs (a few seconds on two cores)."""
GEMM_DTYPES = ("float16", "bfloat16")
"""The dtypes the GEMM dispatcher serves (gemm/shapes.py); other GEMMs stay with torch.matmul."""


@dataclass
class Extracted:
    out: Path
    tasks: list[dict[str, Any]]
    gemm: list[dict[str, Any]]
    skipped: list[dict[str, Any]]

    def to_dict(self, spec: Spec, profile: dict[str, Any]) -> dict[str, Any]:
        return {"model": spec.name, "spec": str(spec.path), "profile_device": profile.get("device"),
                "rebind": REBIND, "tasks": self.tasks, "gemm": self.gemm, "skipped": self.skipped}


REBIND = ("per-instance forward swap: for each module at `paths`, a call whose structure matches `call` "
          "(the same constants, tensors in the order of `inputs`) may run the task's kernel on those tensors and "
          "return `output` rebuilt from its tensors (`returns`); any other call runs the module's own forward")


def extract(spec: Spec, profile: dict[str, Any], top: int, out: Path, built: builder.Built | None = None,
            device: str = "cpu", only: list[str] | None = None) -> Extracted:
    """Write out/tasks/<seam>.py for the top `top` writable LLM seams (or the seams named in `only`),
    out/seams.json and out/gemm_shapes.json."""
    llm = [s for s in profile["seams"] if s["route"] == "llm"]
    if only:
        unknown = sorted(set(only) - {s["id"] for s in llm})
        if unknown:
            raise UsageError(f"the profile has no LLM seam {unknown[0]!r}; its LLM seams are "
                             f"{', '.join(s['id'] for s in llm)}")
        llm, top = [s for s in llm if s["id"] in only], len(only)
    built = built or builder.build(spec)
    model = built.model.to("cpu")
    args, kwargs = builder.inputs(built, spec.cpu_regime, "cpu", seed=spec.seed)
    calls = capture(model, args, kwargs, keep={s["paths"][0] for s in llm})
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    tasks: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for seam in llm:
        if len(tasks) >= top:
            break
        try:
            tasks.append(_one(spec, built, seam, calls, profile, out, device))
        except NotWritable as exc:
            skipped.append({"seam": seam["id"], "class": seam["class"], "reason": str(exc)})
    gemm = [{"seam": s["id"], "paths": s["paths"], "inside": s.get("inside"), "bound": s["bound"],
             "shapes": s.get("gemm", {}),
             "rebind": "torch.ops.warpforge.matmul (gemm/dispatch.py), x @ W.T per shape; fp16/bf16 only"}
            for s in profile["seams"] if s["route"] == "gemm"]
    result = Extracted(out, tasks, gemm, skipped)
    (out / "seams.json").write_text(json.dumps(result.to_dict(spec, profile), indent=1) + "\n")
    shapes = sorted({(g["M"], g["N"], g["K"], g["dtype"]) for s in gemm for g in s["shapes"].values()
                     if g and g["dtype"] in GEMM_DTYPES})
    (out / "gemm_shapes.json").write_text(json.dumps([dict(zip(("M", "N", "K", "dtype"), s)) for s in shapes]) + "\n")
    return result


def _one(spec: Spec, built: builder.Built, seam: dict[str, Any], calls: dict[str, Call], profile: dict[str, Any],
         out: Path, device: str) -> dict[str, Any]:
    path = seam["paths"][0]
    call = calls.get(path)
    if call is None or call.kept is None:
        raise NotWritable(f"{path} is not called at the cpu regime {spec.cpu_regime.axes}")
    for what, shape in (("an argument", call.call), ("its output", call.output)):
        opaque = _opaque(shape)
        if opaque:
            raise NotWritable(f"{what} of {path} is a {opaque}, which a task cannot take or return")
    if not output_paths(call.output):
        raise NotWritable(f"{path} returns no tensor")
    regimes = [r["name"] for r in profile["regimes"]]
    for r in regimes:
        if seam["regimes"][r]["call"] != call.call:
            raise NotWritable(f"{path} is called differently at regime {r} than at the cpu preset (constants differ)")
    module = built.model.get_submodule(path)
    writer = Writer(built.constructed, attn_implementation=getattr(built.config, "_attn_implementation", None))
    expr = writer.module(module)
    written = writer.source()
    presets = _presets(seam, calls, regimes)
    names = input_names(module, call.call)
    title = f"{seam['id']} of {spec.name}: {call.qualname}, as the model calls it"
    doc = _doc(seam, spec, writer.notes)
    text = render(written=written, seam_expr=expr, title=title, doc=doc, call=call.call, output=call.output,
                  names=names, dtypes=[i.dtype for i in call.inputs], params=seam["params"], presets=presets,
                  default="cpu")
    file = out / "tasks" / f"{snake(seam['id'])}.py"
    file.write_text(text)
    try:
        checked = _verify(file, text, module, call, presets, device)
    except NotWritable:
        file.unlink()
        raise
    return {"task": f"tasks/{file.name}", "seam": seam["id"], "class": seam["class"], "paths": seam["paths"],
            "score": seam["score"], "bound": seam["bound"], "call": call.call, "inputs": names, "output": call.output,
            "returns": output_paths(call.output), "presets": list(presets), "checked": checked, "notes": writer.notes,
            "shares": {r: seam["regimes"][r]["share"] for r in regimes}}


def _presets(seam: dict[str, Any], calls: dict[str, Call], regimes: list[str]) -> dict[str, Preset]:
    """cpu (captured here), one per served regime (from the profile), and gpu (the first regime)."""
    here = [calls[p] for p in seam["paths"] if p in calls]
    first = here[0]
    presets = {"cpu": Preset(pooled([c.inputs for c in here]), first.flops, first.bytes)}
    for r in regimes:
        facts = seam["regimes"][r]
        presets[r] = Preset([TensorInfo.from_dict(d) for d in facts["inputs"]], facts["flops"], facts["bytes"])
    presets.setdefault("gpu", presets[regimes[0]])
    return presets


def _verify(file: Path, text: str, real: nn.Module, call: Call, presets: dict[str, Preset],
            device: str) -> dict[str, str]:
    """What was checked, by preset; NotWritable at the first check that fails."""
    from warpforge.evaluate.static import check_source

    report = check_source(re.sub(r"\bModel\b", "ModelNew", text))
    if report.syntax_error or report.rejected:
        raise NotWritable(f"the static pre-filter refuses the written task: {report.syntax_error or report.rejected}")
    module = _import(file)
    try:
        task = module.Model().eval()
        try:
            task.seam.load_state_dict(real.state_dict(), strict=True)
        except RuntimeError as exc:
            raise NotWritable(f"the written module's weights differ from the model's: {str(exc).splitlines()[0]}") from None
        own = dict(task.seam.named_buffers())
        for name, buf in real.named_buffers():
            if name not in own or own[name].dtype != buf.dtype or not torch.equal(own[name], buf.cpu()):
                raise NotWritable(f"the written module's buffer {name} differs from the model's")
        assert call.kept is not None
        inputs, expected = call.kept
        with torch.no_grad():
            mine = _outputs(task(*inputs))
        _compare(mine, expected, "on the activations captured at the cpu preset")
        checked = {"cpu": "same output as the model's module on the captured activations and on drawn inputs"}
        for name, preset in presets.items():
            if device == "cpu" and preset.flops > VERIFY_CPU_FLOPS:
                checked.setdefault(name, f"not checked on the cpu ({preset.flops / 1e9:.1f} GFLOP a call)")
                continue
            drawn = _draw(module, preset)
            mine = _run(task, drawn, device)
            theirs = _run_real(real, call.call, drawn, device)
            _compare(mine, theirs, f"on inputs drawn at the {name} preset")
            checked.setdefault(name, f"same output as the model's module on drawn inputs ({device})")
        return checked
    except NotWritable:
        raise
    except Exception as exc:  # the written code failing to run is why this seam is skipped
        raise NotWritable(f"the written task fails: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    finally:
        sys.modules.pop(module.__name__, None)
        real.to("cpu")


def _import(file: Path) -> Any:
    name = f"warpforge_seam_{file.stem}_{abs(hash(file.read_text())):x}"
    loader = importlib.util.spec_from_file_location(name, file)
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    sys.modules[name] = module
    try:
        loader.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise NotWritable(f"the written task does not import: {type(exc).__name__}: {exc}") from None
    return module


def _draw(module: Any, preset: Preset) -> list[torch.Tensor]:
    for key, value in preset.values().items():
        setattr(module, key, value)
    torch.manual_seed(0)
    return list(module.get_inputs())


def _run(task: nn.Module, inputs: list[torch.Tensor], device: str) -> list[torch.Tensor]:
    with torch.no_grad():
        return [t.cpu() for t in _outputs(task.to(device)(*[x.to(device) for x in inputs]))]


def _run_real(real: nn.Module, shape: Any, inputs: list[torch.Tensor], device: str) -> list[torch.Tensor]:
    """The model's own module, called with the captured call's structure and `inputs` in its slots."""
    args = [_rebuild(a, inputs, device) for a in shape["args"]]
    kwargs = {k: _rebuild(v, inputs, device) for k, v in shape["kwargs"].items()}
    with torch.no_grad():
        output = real.to(device)(*args, **kwargs)
    found: list[torch.Tensor] = []
    template(output, found)
    return [t.cpu() for t in found]


def _rebuild(node: Any, tensors: list[torch.Tensor], device: str) -> Any:
    if "tensor" in node:
        return tensors[node["tensor"]].to(device)
    if "const" in node:
        return node["const"]
    if "dtype" in node:
        return getattr(torch, node["dtype"])
    if "tuple" in node:
        return tuple(_rebuild(x, tensors, device) for x in node["tuple"])
    if "list" in node:
        return [_rebuild(x, tensors, device) for x in node["list"]]
    return {k: _rebuild(v, tensors, device) for k, v in node["dict"].items()}


def _outputs(value: Any) -> list[torch.Tensor]:
    return [value] if isinstance(value, torch.Tensor) else list(value)


def _compare(got: list[torch.Tensor], want: list[torch.Tensor], where: str) -> None:
    """Same code, weights and inputs: equal up to a few units of rounding of the dtype."""
    if len(got) != len(want):
        raise NotWritable(f"the written module returns {len(got)} tensors, the model's {len(want)} ({where})")
    for a, b in zip(got, want):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise NotWritable(f"the written module returns {tuple(a.shape)} {a.dtype}, the model's "
                              f"{tuple(b.shape)} {b.dtype} ({where})")
        if not a.is_floating_point():
            if not torch.equal(a, b):
                raise NotWritable(f"the written module's output differs from the model's ({where})")
            continue
        a64, b64 = a.double(), b.double()
        scale = float(b64.abs().max()) if b64.numel() else 0.0
        err = float((a64 - b64).abs().max()) if b64.numel() else 0.0
        tol = 8 * torch.finfo(a.dtype).eps * max(scale, 1e-30)
        if not err <= tol:
            raise NotWritable(f"the written module's output differs from the model's by {err:.3g} "
                              f"(scale {scale:.3g}) {where}")


def _opaque(node: Any) -> str | None:
    if not isinstance(node, dict):
        return None
    if "opaque" in node:
        return str(node["opaque"])
    children = list(node.get("tuple", ())) + list(node.get("list", ())) + list((node.get("dict") or {}).values())
    children += list(node.get("args", ())) + list((node.get("kwargs") or {}).values())
    return next((o for o in map(_opaque, children) if o), None)


def _doc(seam: dict[str, Any], spec: Spec, notes: list[str]) -> str:
    paths = seam["paths"]
    where = paths[0] + (f" and {len(paths) - 1} more like it" if len(paths) > 1 else "")
    lines = [f"Extracted by `warpforge model extract` from {spec.path.name} ({where}); at most "
             f"{100 * seam['bound']:.1f} % of the model's forward. The module's own forward is the reference: its "
             "class and the code it calls are copied below with the model's state written into __init__, its "
             "weights drawn like the model's, its inputs drawn like the activations the model gave it (mean, std, "
             "range) at each served regime (WARPFORGE['sizes'])."]
    lines = [textwrap.fill(lines[0], 100)] + [textwrap.fill(f"- {n}", 100, subsequent_indent="  ") for n in notes]
    return "\n".join(lines)
