"""`warpforge model profile`: build the spec's model, capture it, time each regime's forward by
module, and rank the seams (seams.py). `profile_model` returns a `Profile`; `write` puts
profile.json and profile.html (report.py) in a folder. Nothing is asked of any LLM here.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from warpforge.model import build as builder
from warpforge.model.capture import Exported, capture, export_ops, heights
from warpforge.model.seams import Seam, candidates, coverage, group, peaks_for
from warpforge.model.spec import Regime, Spec
from warpforge.model.timing import time_modules

VERSION = 1


@dataclass
class RegimeTime:
    regime: Regime
    forward_ms: float
    seconds: float
    """Wall time this regime's capture and timing took."""


@dataclass
class Profile:
    spec: Spec
    device: str
    hardware: dict[str, Any]
    peaks: dict[str, float] | None
    regimes: list[RegimeTime]
    seams: list[Seam]
    exported: Exported
    iters: int
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": VERSION, "spec": str(self.spec.path), "model": self.spec.name, "device": self.device,
            "dtype": self.spec.dtype, "hardware": self.hardware, "peaks": self.peaks, "iters": self.iters,
            "ranking": "share x headroom" if self.peaks else "share (no roofline peak for this device)",
            "export": self.exported.to_dict(), "warnings": self.warnings,
            "checks": {"compile": self.spec.keep_compile, "export": self.spec.keep_export},
            "regimes": [{"name": r.regime.name, "axes": r.regime.axes, "weight": r.regime.weight,
                         "forward_ms": r.forward_ms, "seconds": r.seconds,
                         "covered": coverage(self.seams, r.regime.name)} for r in self.regimes],
            "seams": [s.to_dict() for s in self.seams],
        }


def profile_model(spec: Spec, device: str, iters: int = 5, export: bool = True,
                  built: builder.Built | None = None) -> Profile:
    """Profile every regime of `spec` on `device` (the model is built unless `built` is given)."""
    from warpforge.evaluate.hardware import fingerprint

    built = built or builder.build(spec)
    model = built.model.to(device)
    tree = heights(model)
    calls, times, regime_times = {}, {}, []
    exported = Exported(False, "not attempted (--no-export)")
    for i, regime in enumerate(spec.regimes):
        started = time.perf_counter()
        args, kwargs = builder.inputs(built, regime, device, seed=spec.seed)
        if i == 0 and export:
            exported = export_ops(model, args, kwargs)
        calls[regime.name] = capture(model, args, kwargs)
        routes = candidates(calls[regime.name], tree)
        times[regime.name] = time_modules(model, args, kwargs, device, set(routes), iters=iters)
        regime_times.append(RegimeTime(regime, times[regime.name][0], time.perf_counter() - started))
        del args, kwargs
    routes = candidates(calls[spec.regimes[0].name], tree)
    hardware = fingerprint(device)
    peaks = peaks_for(device, str(hardware.get("gpu") or ""))
    seams = group(list(spec.regimes), calls, times, routes, peaks)
    for seam in seams:
        seam.ops = _ops(exported, seam.paths[0])
    warnings = []
    if spec.keep_export and not exported.ok and export:
        warnings.append(f"the spec says torch.export must keep working, but the original model does not export: "
                        f"{exported.error}")
    return Profile(spec, device, hardware, peaks, regime_times, seams, exported, iters, warnings)


def write(profile: Profile, out: Path) -> tuple[Path, Path]:
    """profile.json and profile.html in `out` (created)."""
    from warpforge.model.report import html_page

    out.mkdir(parents=True, exist_ok=True)
    data = profile.to_dict()
    json_path, html_path = out / "profile.json", out / "profile.html"
    json_path.write_text(json.dumps(data, indent=1) + "\n")
    html_path.write_text(html_page(data), encoding="utf-8")
    return json_path, html_path


def read(path: Path) -> dict[str, Any]:
    """A profile.json written by `write`; UsageError when it is not one."""
    from warpforge.errors import UsageError

    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read the profile {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("seams"), list):
        raise UsageError(f"{path} is not a profile.json of this warpforge (run `warpforge model profile` again)")
    return data


def _ops(exported: Exported, path: str) -> dict[str, int]:
    """The exported graph's ATen ops inside the module at `path` (its children's included)."""
    total: dict[str, int] = {}
    for where, ops in exported.ops.items():
        if where == path or where.startswith(path + "."):
            for op, n in ops.items():
                total[op] = total.get(op, 0) + n
    return dict(sorted(total.items(), key=lambda kv: -kv[1]))


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"
