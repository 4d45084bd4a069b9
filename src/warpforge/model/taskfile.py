"""The text of one extracted task: the written module (inline.py), then a KernelBench-format
`Model` that builds it and calls it as the model did, `get_inputs()` drawing each input from the
statistics captured at a regime, and `WARPFORGE` metadata with one size preset per regime.

The call is replayed from its captured structure (capture.template): tensors become the task's
inputs in order, constants stay constants, tuples and dicts are rebuilt, and the returned
structure is reduced to its tensors.
"""

from __future__ import annotations

import inspect
import keyword
import math
import re
from dataclasses import dataclass
from typing import Any

from torch import nn

from warpforge.model.capture import TensorInfo

WEIGHT_STD_FLOOR = (0.1, 0.02)
"""A weight the model holds constant (an RMSNorm's ones, a zero bias) is drawn with standard
deviation 0.1 |mean| + 0.02, so that a kernel that drops it is caught (the suite's rmsnorm task
does the same); every other weight is drawn with its own mean and standard deviation."""


@dataclass
class Preset:
    """One size preset: each input's shape and statistics, and one call's FLOPs and bytes."""

    inputs: list[TensorInfo]
    flops: float
    bytes: int

    def values(self) -> dict[str, Any]:
        return {"SHAPES": [list(i.shape) for i in self.inputs], "STATS": [_stats(i) for i in self.inputs],
                "FLOPS": int(self.flops), "BYTES": int(self.bytes)}


def input_names(module: nn.Module, call: Any) -> list[str]:
    """A readable, unique name for each tensor slot of `call`, in slot order: the forward's parameter
    names, `name_0`, `name_1` for tensors inside a tuple or dict."""
    try:
        params = [p for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names: list[str] = []

    def walk(node: Any, base: str) -> None:
        if "tensor" in node:
            name = _identifier(base)
            while name in names:
                name += "_"
            names.append(name)
        for key in ("tuple", "list"):
            for j, item in enumerate(node.get(key, ())):
                walk(item, f"{base}_{j}")
        for k, item in (node.get("dict") or {}).items():
            walk(item, f"{base}_{k}")

    for i, arg in enumerate(call["args"]):
        walk(arg, params[i].name if i < len(params) else f"arg{i}")
    for key, arg in call["kwargs"].items():
        walk(arg, key)
    return names


def call_text(call: Any, names: list[str]) -> str:
    """`self.seam(...)`'s argument list for `call`, its tensors taken from `names` by slot."""

    def expr(node: Any) -> str:
        if "tensor" in node:
            return names[node["tensor"]]
        if "const" in node:
            v = node["const"]
            return repr(v)
        if "dtype" in node:
            return f"torch.{node['dtype']}"
        if "tuple" in node:
            items = [expr(x) for x in node["tuple"]]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if "list" in node:
            return "[" + ", ".join(expr(x) for x in node["list"]) + "]"
        if "dict" in node:
            return "{" + ", ".join(f"{k!r}: {expr(v)}" for k, v in node["dict"].items()) + "}"
        raise ValueError(f"an argument of type {node.get('opaque')} cannot be written")

    return ", ".join([expr(a) for a in call["args"]] + [f"{k}={expr(v)}" for k, v in call["kwargs"].items()])


def output_paths(output: Any, at: str = "out") -> list[str]:
    """Expressions for the tensors of a module's returned structure, in order."""
    if "tensor" in output:
        return [at]
    found = []
    for key in ("tuple", "list"):
        for j, item in enumerate(output.get(key, ())):
            found += output_paths(item, f"{at}[{j}]")
    for k, item in (output.get("dict") or {}).items():
        found += output_paths(item, f"{at}[{k!r}]")
    return found


def render(*, written: str, seam_expr: str, title: str, doc: str, call: Any, output: Any, names: list[str],
           dtypes: list[str], params: dict[str, dict[str, Any]], presets: dict[str, Preset], default: str) -> str:
    """The whole task file."""
    returns = output_paths(output)
    body = f"self.seam({call_text(call, names)})"
    if returns == ["out"]:
        forward = f"        return {body}"
    else:
        forward = f"        out = {body}\n        return {', '.join(returns)}"
    weights = {k: [_round(v["mean"]), _weight_std(v)] for k, v in params.items()}
    start = presets[default].values()
    sizes = {name: p.values() for name, p in presets.items()}
    return f'''"""{title}

{doc}
"""

{written.rstrip()}


# ---- the task (KernelBench format) -------------------------------------------------------
# each input's shape and [mean, std, low, high] at the size preset in use (WARPFORGE["sizes"])
SHAPES = {start["SHAPES"]!r}
STATS = {start["STATS"]!r}
DTYPES = [{", ".join(f"torch.{d}" for d in dtypes)}]
FLOPS = {start["FLOPS"]!r}
BYTES = {start["BYTES"]!r}
# each weight's [mean, std] in the model: the weights are drawn like them
WEIGHTS = {weights!r}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.seam = {seam_expr}
        with torch.no_grad():
            for name, weight in self.seam.named_parameters():
                mean, std = WEIGHTS[name]
                weight.normal_(mean, std)

    def forward(self, {", ".join(names)}):
{forward}


def _draw(shape, dtype, stats):
    mean, std, low, high = stats
    if dtype.is_floating_point:
        x = torch.randn(shape) * (1.0 if std is None else std) + (0.0 if mean is None else mean)
        if low is not None and high is not None:
            x = x.clamp(low, high)
        return x.to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape) < (0.5 if mean is None else mean)
    return torch.randint(int(low), int(high) + 1, shape, dtype=dtype)


def get_inputs():
    return [_draw(shape, dtype, stats) for shape, dtype, stats in zip(SHAPES, DTYPES, STATS)]


def get_init_inputs():
    return []


WARPFORGE = {{
    "description": {title!r},
    "sizes": {sizes!r},
    # FlopCounterMode's count (matmul, convolution, attention) and the bytes one call must move
    "flops": "FLOPS",
    "bytes": "BYTES",
}}
'''


def snake(name: str) -> str:
    """LlamaRMSNorm -> llama_rms_norm; Linear_64x128 -> linear_64x128."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _stats(i: TensorInfo) -> list[float | None]:
    return [_round(i.mean), _round(i.std), _round(i.low), _round(i.high)]


def _round(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(f"{v:.6g}")


def _weight_std(w: dict[str, Any]) -> float:
    mean, std = float(w["mean"]), float(w["std"])
    if std <= 1e-6 * (abs(mean) + 1.0):
        std = WEIGHT_STD_FLOOR[0] * abs(mean) + WEIGHT_STD_FLOOR[1]
    return float(f"{std:.6g}")


def _identifier(text: str) -> str:
    name = re.sub(r"\W", "_", text)
    if not name or name[0].isdigit() or keyword.iskeyword(name) or name in ("self", "torch", "nn", "out"):
        name = f"x_{name}"
    return name
