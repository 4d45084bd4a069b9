"""`warpforge model prove`: the end-to-end proof that a patched model (`warpforge.apply`) is the
model, runs the kernels, and still compiles and exports (issue 43, part 6).

Checks, each with its numbers in the report:
  correctness  the patched model and the original, each against a float64 copy of the original on
               fresh inputs at each regime (the cpu regime on the CPU): the patched model's error
               must be within the evaluator's bar (verify.tolerance_for: NATIVE_ERROR_FACTOR x the
               original's own error, floored by the dtype's default); for a model with logits, its
               top-1 agreement with float64 no worse than the original's less TOP1_SLACK.
  engagement   in those forwards every applied seam served calls and none fell back (apply's
               counters); torch.profiler names the custom ops it saw.
  compile      torch.compile(patched, fullgraph=True) (aot_eager on the CPU) runs and gives the
               patched eager output within the bar.
  export       torch.export of the patched model, saved and loaded back, gives that output too.
  speed        (never required) paired rounds eager vs patched eager, after an A/A of the original
               against itself: median ratio and interval (metrics.paired_speedup), words from claim.py.
"""

from __future__ import annotations

import copy
import io
import json
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from warpforge import metrics
from warpforge.claim import claim_of
from warpforge.evaluate.verify import error_stats, tolerance_for
from warpforge.model import build as builder
from warpforge.model.apply import NAMESPACE, ApplyReport, apply
from warpforge.model.capture import template
from warpforge.model.spec import Spec

TOP1_SLACK = 0.01
"""How much lower than the original's (as a share of positions) the patched model's top-1 agreement
with float64 may be: a near-tie of the two top logits may flip either way under any rounding."""


@dataclass
class Check:
    name: str
    passed: bool
    required: bool = True
    detail: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProofReport:
    model: str
    device: str
    regimes: list[str]
    apply: dict[str, Any]
    checks: list[Check]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks if c.required)

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


def prove(spec: Spec, archive: str | Path, seams_json: str | Path, device: str = "cpu", rounds: int = 5,
          iters: int = 3, seed: int = 1234) -> ProofReport:
    """Build the spec's model, patch it with `apply` and run every check."""
    built = builder.build(spec)
    model = built.model.to(device)
    original = copy.deepcopy(model)
    exact = copy.deepcopy(model).to(torch.float64)
    patched, applied = apply(model, archive, seams_json)
    regimes = [spec.cpu_regime] if device == "cpu" else list(spec.regimes)
    inputs = {r.name: builder.inputs(built, r, device, seed=seed + i) for i, r in enumerate(regimes)}
    checks = [*correctness_and_engagement(patched, original, exact, applied, inputs)]
    call = inputs[regimes[0].name]
    checks.append(compile_check(patched, call, device))
    checks.append(export_check(patched, call))
    checks.append(speed_check(patched, original, call, device, rounds, iters))
    return ProofReport(spec.name, device, [r.name for r in regimes], applied.to_dict(), checks)


Call = tuple[list[Any], dict[str, Any]]


def outputs(value: Any) -> list[torch.Tensor]:
    """A forward's output tensors: a language model's logits alone, else every tensor in it."""
    logits = getattr(value, "logits", None)
    if isinstance(logits, torch.Tensor):
        return [logits]
    found: list[torch.Tensor] = []
    template(dict(value) if hasattr(value, "to_tuple") else value, found)
    return found


def _forward(model: nn.Module, call: Call, dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    args, kwargs = call
    if dtype is not None:
        args = [_cast(a, dtype) for a in args]
        kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
    with torch.no_grad():
        return outputs(model(*args, **kwargs))


def _cast(value: Any, dtype: torch.dtype) -> Any:
    return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value


def _counters(report: ApplyReport) -> dict[str, tuple[int, int]]:
    return {s.seam: (s.served, s.fallbacks) for s in report.applied}


def _compare(got: list[torch.Tensor], exact: list[torch.Tensor], native: list[torch.Tensor]) -> tuple[bool, dict[str, Any]]:
    """The evaluator's bar for each output: within tolerance_for(dtype, native error) of float64."""
    ok, rows = len(got) == len(exact), list[dict[str, Any]]()
    for out, ref, own in zip(got, exact, native):
        if out.shape != ref.shape:
            ok = False
            rows.append({"shape": list(out.shape), "want": list(ref.shape)})
            continue
        _, own_l2, own_max = error_stats(own, ref)
        _, l2, max_rel = error_stats(out, ref)
        tol = tolerance_for(out.dtype, {}, False, (own_l2, own_max))
        fine = l2 <= tol.rel_l2 and max_rel <= tol.max_rel
        ok = ok and fine
        rows.append({"rel_l2": l2, "max_rel": max_rel, "original_rel_l2": own_l2, "original_max_rel": own_max,
                     "bar_rel_l2": tol.rel_l2, "bar_max_rel": tol.max_rel, "ok": fine})
    return ok, {"outputs": rows}


def _top1(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.argmax(-1) == b.argmax(-1)).double().mean())


def correctness_and_engagement(patched: nn.Module, original: nn.Module, exact: nn.Module, applied: ApplyReport,
                               inputs: dict[str, Call]) -> list[Check]:
    correct, engaged = True, bool(applied.applied)
    numbers: dict[str, Any] = {}
    served: dict[str, Any] = {}
    notes: list[str] = [] if applied.applied else ["no seam was applied"]
    for name, call in inputs.items():
        want = _forward(exact, call, torch.float64)
        own = _forward(original, call)
        before = _counters(applied)
        got = _forward(patched, call)
        after = _counters(applied)
        ok, row = _compare(got, want, own)
        if got and own and getattr(original, "config", None) is not None and got[0].dim() >= 2:
            row["top1_patched_vs_original"] = _top1(got[0], own[0])
            row["top1_patched_vs_float64"] = p64 = _top1(got[0], want[0])
            row["top1_original_vs_float64"] = o64 = _top1(own[0], want[0])
            if p64 < o64 - TOP1_SLACK:
                ok = False
                notes.append(f"{name}: top-1 agreement with float64 {p64:.3f} < the original's {o64:.3f}")
        if not ok:
            notes.append(f"{name}: the patched model's error is over the bar")
        correct = correct and ok
        numbers[name] = row
        served[name] = {}
        for seam, (s0, f0) in before.items():
            s, f = after[seam][0] - s0, after[seam][1] - f0
            served[name][seam] = {"served": s, "fallbacks": f}
            if s == 0 or f > 0:
                engaged = False
                notes.append(f"{name}: {seam} served {s} calls, {f} fell back")
    ops = _profiled_ops(patched, next(iter(inputs.values())))
    return [Check("correctness", correct, detail="; ".join(n for n in notes if "error" in n or "top-1" in n),
                  numbers=numbers),
            Check("engagement", engaged, detail="; ".join(n for n in notes if "served" in n or "no seam" in n),
                  numbers={"regimes": served, "profiled_ops": ops})]


def _profiled_ops(model: nn.Module, call: Call) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _forward(model, call)
    return sorted({e.name for e in prof.events() if e.name.startswith(f"{NAMESPACE}::")})


def _close(got: list[torch.Tensor], want: list[torch.Tensor]) -> tuple[bool, float]:
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
        return False, float("inf")
    worst = max((error_stats(g, w)[1] for g, w in zip(got, want)), default=0.0)
    tol = tolerance_for(want[0].dtype, {}, False) if want else None
    return tol is None or worst <= tol.rel_l2, worst


def compile_check(patched: nn.Module, call: Call, device: str) -> Check:
    want = _forward(patched, call)
    seen: list[str] = []
    inner = "aot_eager" if device == "cpu" else "inductor"

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return torch._dynamo.lookup_backend(inner)(gm, example_inputs)

    torch._dynamo.reset()
    try:
        compiled: Any = torch.compile(patched, fullgraph=True, backend=backend)
        got = _forward(compiled, call)
    except Exception as exc:
        return Check("compile", False, detail=f"torch.compile(fullgraph=True, {inner}) failed: "
                                              f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    finally:
        torch._dynamo.reset()
    ok, err = _close(got, want)
    ops = sorted({t for t in seen if t.startswith(NAMESPACE)})
    return Check("compile", ok, detail=f"fullgraph=True, {inner}" + ("" if ok else ": output differs from eager"),
                 numbers={"rel_l2_vs_eager": err, "ops_in_graph": ops})


def export_check(patched: nn.Module, call: Call) -> Check:
    args, kwargs = call
    want = _forward(patched, call)
    try:
        with torch.no_grad():
            program = torch.export.export(patched, tuple(args), kwargs, strict=False)
        buffer = io.BytesIO()
        torch.export.save(program, buffer)
        buffer.seek(0)
        loaded = torch.export.load(buffer)
        got = _forward(loaded.module(), call)
    except Exception as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return Check("export", False, detail=f"torch.export save/load failed: {type(exc).__name__}: {text}")
    ops = sorted({str(n.target) for n in program.graph.nodes if str(n.target).startswith(NAMESPACE)})
    ok, err = _close(got, want)
    return Check("export", ok, detail="saved and loaded back" + ("" if ok else ": output differs from eager"),
                 numbers={"rel_l2_vs_eager": err, "ops_in_graph": ops})


def _time(model: nn.Module, call: Call, device: str, iters: int) -> float:
    samples = []
    for _ in range(iters):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        _forward(model, call)
        if device == "cuda":
            torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def paired(reference: nn.Module, candidate: nn.Module, call: Call, device: str, rounds: int, iters: int,
           rng: random.Random) -> dict[str, Any]:
    """Rounds of both timed back to back, the order drawn per round (as evaluate/paired.py does)."""
    ref_ms: list[float] = []
    cand_ms: list[float] = []
    _forward(reference, call), _forward(candidate, call)  # warm-up
    for _ in range(rounds):
        if rng.random() < 0.5:
            ref_ms.append(_time(reference, call, device, iters))
            cand_ms.append(_time(candidate, call, device, iters))
        else:
            cand_ms.append(_time(candidate, call, device, iters))
            ref_ms.append(_time(reference, call, device, iters))
    speedup, (low, high) = metrics.paired_speedup(ref_ms, cand_ms)
    claim = claim_of({"status": "correct", "paired": {"speedup": speedup, "interval": [low, high]}})
    return {"speedup": speedup, "interval": [low, high], "words": claim.words(), "verdict": claim.verdict,
            "reference_ms": ref_ms, "candidate_ms": cand_ms}


def speed_check(patched: nn.Module, original: nn.Module, call: Call, device: str, rounds: int, iters: int) -> Check:
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)  # as the evaluator's default (--cpu-threads)
    try:
        rng = random.Random(0)
        aa = paired(original, original, call, device, rounds, iters, rng)
        ab = paired(original, patched, call, device, rounds, iters, rng)
    finally:
        torch.set_num_threads(threads)
    return Check("speed", True, required=False,
                 detail=f"A/A {aa['words']}; patched vs eager {ab['words']} ({rounds} rounds of {iters} forwards)",
                 numbers={"aa": aa, "patched_vs_eager": ab})


def write(report: ProofReport, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "proof.json"
    path.write_text(json.dumps(report.to_dict(), indent=2))
    return path

