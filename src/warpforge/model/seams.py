"""Seams: the units of a model a patch can rebind, grouped and ranked.

A seam is a called module that is a leaf or holds only leaves (height <= 1 in the module tree) and
is not inside another such module: an RMSNorm, an MLP of Linears, an attention module of
projections, an embedding. Every nn.Linear is also a seam of its own, routed to the per-shape GEMM
dispatcher (gemm/dispatch.py), not to the LLM; a Linear inside an MLP is counted in both (the
MLP's time includes its GEMMs'). Instances are grouped by class, the shapes, dtypes and constants
of their calls at every regime, and their weights' shapes: the 16 RMSNorms of a decoder are one
seam with 16 paths.

Rank: a seam's score is its share of the forward times its roofline headroom, averaged over the
regimes by weight. The roofline is the simplest one (Williams et al. 2009): a call cannot take
less than max(FLOPs / peak FLOP/s, bytes / peak bandwidth), FLOPs from FlopCounterMode (matmul,
convolution, attention; elementwise work is not counted) and bytes the call's inputs, outputs,
weights and buffers moved once; peaks from metrics.PEAKS for the GPUs listed there. Headroom is
1 - floor / measured. Where no peak is known (the CPU, an unlisted GPU) headroom is taken as 1 and
the rank is the time share alone. The Amdahl bound of a seam is its share: making it free saves at
most that fraction of the forward.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from warpforge import metrics
from warpforge.model.capture import Call, TensorInfo
from warpforge.model.spec import Regime


@dataclass
class SeamRegime:
    """A seam at one regime: its time in the forward (every instance, every call) and one call's facts."""

    ms: float
    share: float
    calls: int
    flops: float
    bytes: int
    floor_ms: float | None
    call: Any
    output: Any
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]

    @property
    def headroom(self) -> float | None:
        if self.floor_ms is None or not self.ms > 0:
            return None
        return max(0.0, 1.0 - self.floor_ms * self.calls / self.ms)

    def to_dict(self) -> dict[str, Any]:
        return {"ms": self.ms, "share": self.share, "calls": self.calls, "flops": self.flops, "bytes": self.bytes,
                "floor_ms": self.floor_ms, "headroom": self.headroom, "call": self.call, "output": self.output,
                "inputs": [i.to_dict() for i in self.inputs], "outputs": [o.to_dict() for o in self.outputs]}


@dataclass
class Seam:
    id: str
    qualname: str
    route: str
    """"llm": a task for the loop; "gemm": the per-shape GEMM dispatcher."""
    paths: list[str]
    regimes: dict[str, SeamRegime]
    params: dict[str, dict[str, Any]]
    """Weight name -> shape, dtype, mean, std (pooled over the instances)."""
    ops: dict[str, int] = field(default_factory=dict)
    inside: str | None = None
    """A GEMM seam inside an LLM seam: that seam's id (their times overlap)."""
    score: float = 0.0

    @property
    def cls(self) -> str:
        return self.qualname.rpartition(".")[2]

    def bound(self) -> float:
        """The largest share of the forward this seam takes at any regime (its Amdahl bound)."""
        return max((r.share for r in self.regimes.values()), default=0.0)

    def gemm(self, regime: str) -> dict[str, Any] | None:
        """M, N, K and dtype of a Linear seam's GEMM at `regime` (x @ W.T, x flattened to rows)."""
        if self.route != "gemm":
            return None
        x, w = self.regimes[regime].inputs[0], self.params["weight"]
        return {"M": math.prod(x.shape[:-1]), "N": w["shape"][0], "K": w["shape"][1], "dtype": x.dtype}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "class": self.qualname, "route": self.route, "paths": self.paths, "score": self.score,
                "bound": self.bound(), "inside": self.inside, "params": self.params, "ops": self.ops,
                "regimes": {k: v.to_dict() for k, v in self.regimes.items()},
                **({"gemm": {k: self.gemm(k) for k in self.regimes}} if self.route == "gemm" else {})}


def candidates(calls: dict[str, Call], heights: dict[str, int]) -> dict[str, str]:
    """Path -> route of every seam among the called modules."""
    found = {}
    for path, call in calls.items():
        if not path:
            continue
        parent = path.rpartition(".")[0]
        if isinstance(call.module, nn.Linear):
            found[path] = "gemm"
        elif heights.get(path, 9) <= 1 and (parent == "" or heights.get(parent, 9) >= 2):
            found[path] = "llm"
    return found


def group(regimes: list[Regime], calls: dict[str, dict[str, Call]], times: dict[str, tuple[float, dict[str, float]]],
          routes: dict[str, str], peaks: dict[str, float] | None) -> list[Seam]:
    """Seams from each regime's calls and times (both keyed by regime name), ranked best first."""
    keys: dict[str, list[str]] = {}
    first_calls = calls[regimes[0].name]
    holders = [p for p, route in routes.items() if route == "llm"]
    for path in routes:
        if all(path in calls[r.name] for r in regimes):
            # a GEMM inside an MLP and the lm_head of the same shape are apart: their times overlap others' or not
            holder = next((first_calls[h].qualname for h in holders if path.startswith(h + ".")), None)
            keys.setdefault(_key(path, regimes, calls) + str(holder), []).append(path)
    seams = []
    for paths in keys.values():
        first = calls[regimes[0].name][paths[0]]
        modules = [calls[regimes[0].name][p].module for p in paths]
        per_regime = {r.name: _at_regime(paths, calls[r.name], times[r.name], peaks) for r in regimes}
        seam = Seam("", first.qualname, routes[paths[0]], paths, per_regime, _params(modules))
        weights = sum(r.weight for r in regimes)
        seam.score = sum(r.weight * s.share * (1.0 if s.headroom is None else s.headroom)
                         for r, s in zip(regimes, per_regime.values())) / weights
        seams.append(seam)
    seams.sort(key=lambda s: (-s.score, s.qualname))
    _name(seams)
    llm = {p: s.id for s in seams if s.route == "llm" for p in s.paths}
    for s in seams:
        if s.route == "gemm":
            s.inside = next((llm[p] for p in llm if s.paths[0].startswith(p + ".")), None)
    return seams


def coverage(seams: list[Seam], regime: str) -> float:
    """The share of the forward inside some seam at `regime` (LLM seams and the GEMMs outside them)."""
    return sum(s.regimes[regime].share for s in seams if s.inside is None)


def peaks_for(device: str, device_name: str) -> dict[str, float] | None:
    """metrics.PEAKS for a listed GPU; None on the CPU (no nominal peak: rank by time share)."""
    return metrics.peaks_for(device_name) if device == "cuda" else None


def _key(path: str, regimes: list[Regime], calls: dict[str, dict[str, Call]]) -> str:
    module = calls[regimes[0].name][path].module
    weights = sorted((n, tuple(t.shape), str(t.dtype)) for n, t in module.state_dict().items())
    per_regime = [(calls[r.name][path].call, [(i.shape, i.dtype) for i in calls[r.name][path].inputs]) for r in regimes]
    return json.dumps([calls[regimes[0].name][path].qualname, weights, per_regime], default=str)


def _at_regime(paths: list[str], calls: dict[str, Call], times: tuple[float, dict[str, float]],
               peaks: dict[str, float] | None) -> SeamRegime:
    forward_ms, module_ms = times
    first = calls[paths[0]]
    ms = sum(module_ms.get(p, 0.0) for p in paths)
    floor = None
    if peaks is not None:
        dtype = next((i.dtype for i in first.inputs if i.dtype.startswith(("float", "bfloat"))), "float32")
        try:
            peak = metrics.peak_flops_for_dtype(peaks, dtype)
        except ValueError:
            peak = None
        floor = metrics.roofline_ms(first.flops, first.bytes, peak, peaks.get("bytes_per_s"))
    return SeamRegime(ms=ms, share=ms / forward_ms if forward_ms > 0 else 0.0,
                      calls=sum(calls[p].count for p in paths), flops=first.flops, bytes=first.bytes, floor_ms=floor,
                      call=first.call, output=first.output, inputs=pooled([calls[p].inputs for p in paths]),
                      outputs=pooled([calls[p].outputs for p in paths]))


def pooled(per_instance: list[list[TensorInfo]]) -> list[TensorInfo]:
    """Each slot's statistics over all instances: the mean of means, the pooled standard deviation,
    the widest range (a norm's input differs layer by layer; a task draws from all of them)."""
    out = []
    for slot in zip(*per_instance):
        first = slot[0]
        means = [s.mean for s in slot if s.mean is not None]
        mean = sum(means) / len(means) if means else None
        std = None
        if mean is not None and all(s.std is not None for s in slot):
            second = sum((s.std or 0.0) ** 2 + (s.mean or 0.0) ** 2 for s in slot) / len(slot)
            std = math.sqrt(max(0.0, second - mean * mean))
        lows = [s.low for s in slot if s.low is not None]
        highs = [s.high for s in slot if s.high is not None]
        out.append(TensorInfo(first.shape, first.dtype, mean, std, min(lows) if lows else None,
                              max(highs) if highs else None))
    return out


def _params(modules: list[nn.Module]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, p in modules[0].named_parameters():
        values = [dict(m.named_parameters())[name].detach().double() for m in modules]
        means = [float(v.mean()) for v in values]
        second = [float((v * v).mean()) for v in values]
        mean = sum(means) / len(means)
        out[name] = {"shape": list(p.shape), "dtype": str(p.dtype).removeprefix("torch."), "mean": mean,
                     "std": math.sqrt(max(0.0, sum(second) / len(second) - mean * mean))}
    return out


def _name(seams: list[Seam]) -> None:
    """Ids in rank order: the class name (Linear: Linear_KxN), numbered from the second on."""
    taken: dict[str, int] = {}
    for s in seams:
        base = s.cls
        if s.route == "gemm" and "weight" in s.params:
            n, k = s.params["weight"]["shape"][:2]
            base = f"{s.cls}_{k}x{n}"
        taken[base] = taken.get(base, 0) + 1
        s.id = base if taken[base] == 1 else f"{base}_{taken[base]}"
