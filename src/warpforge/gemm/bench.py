"""`warpforge gemm bench`: the dispatcher against every baseline, per shape, offline and server mode.

Measured on fresh operands (a different seed from tuning, so a choice is not judged on the data
it was picked with) through `evaluate.bench.time_calls`:
- offline: calls back to back, L2 flushed by a read before each, device time between events;
- server: a random 1-20 ms idle gap before each call (clocks and caches go cold, as in CUDA-L2's
  server mode); device time and host latency (wall clock around call + sync) both reported.

Per shape: torch.matmul in the caller's layout and in the other layout, cuBLASLt's heuristic
first choice and the fastest of all the algorithms it returns (autotuned; its pick is re-made
here on fresh data, which favours the baseline), torch.compile(mode="max-autotune-no-cudagraphs") on the first
`compile_shapes` shapes spread over the list (it compiles for tens of seconds per shape; without CUDA graphs
because Inductor's graphs copy every input whose address changes into a static buffer, 8-57 us per call on
an H100, benchmarks/results/gemm_compile_probe_2026-11-25.txt, and the operands rotate here), and `warpforge.gemm.matmul`
itself. When the dispatcher picks torch.matmul it runs the same kernel, so its time is torch's
time; every other choice is timed through the dispatcher.

Results are rewritten after each shape (resumable: measured shapes are skipped on a re-run).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from warpforge.config import TimingBudget
from warpforge.evaluate.bench import heap_frozen
from warpforge.evaluate.hardware import fingerprint
from warpforge.gemm import choices, dispatch, families
from warpforge.gemm.family import Problem
from warpforge.gemm.shapes import GemmShape, gpu_slug
from warpforge.gemm.tune import FINAL, SCREEN, ShapeBench, device_name, release_memory

MODES = ("offline", "server")
COMPILE_MODE = "max-autotune-no-cudagraphs"  # Inductor's autotuned kernel, not its input copies (see above)


@dataclass
class BenchSettings:
    modes: tuple[str, ...] = ("offline",)
    cublaslt: bool = True
    lt_variants: int = 2
    compile_shapes: int = 0
    seed: int = 1
    final: TimingBudget = FINAL
    screen: TimingBudget = SCREEN
    server: TimingBudget = TimingBudget(warmup_ms=5.0, rep_ms=60.0, min_reps=8, max_reps=40)


def results_path(out_dir: Path, gpu: str, set_name: str, mode: str, date: str, online: bool = False) -> Path:
    """gemm_<gpu>_<set>[_online]_<mode>_<date>.json (_online: unmeasured shapes tuned on first use)."""
    stem = Path(set_name).stem if set_name not in ("cudal2", "llm") else set_name
    return out_dir / f"gemm_{gpu_slug(gpu)}_{stem}{'_online' * online}_{mode}_{date}.json"


def versions() -> dict[str, Any]:
    info = fingerprint("cuda" if torch.cuda.is_available() else "cpu")
    try:
        from importlib.metadata import version

        info["nvmath"] = version("nvmath-python")
    except Exception:
        info["nvmath"] = None
    return info


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data.get("shapes"), list) else None
    except (OSError, json.JSONDecodeError):
        return None


def _save(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def _ratio(base: float | None, ours: float | None) -> float | None:
    return base / ours if base and ours else None


def bench_shape(shape: GemmShape, layout: str, device: str, settings: BenchSettings, compile_it: bool,
                rng: random.Random) -> dict[str, dict[str, Any]]:
    """One shape: {mode: row} with the fields the results files hold."""
    sb = ShapeBench(shape, layout, device, settings.seed)
    a0, b0 = sb.sets[0]
    user_b = (lambda b: b) if layout == "nn" else (lambda b: b.t())  # what a caller passes to matmul
    ours: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = lambda a, b: dispatch.matmul(a, user_b(b))
    rel_err = sb.verify("warpforge", ours)
    # after the dispatcher has run the shape: what ran (a choice that cannot run here reads as its fallback)
    choice, how = dispatch.choose(a0, user_b(b0)) if device == "cuda" else ("torch", "cpu")
    base: dict[str, Any] = {"M": shape.M, "N": shape.N, "K": shape.K, "dtype": shape.dtype, "layout": layout,
                            "source": shape.source, "flops": shape.flops, "choice": choice, "choice_how": how,
                            "rel_err": rel_err}
    if not base["rel_err"] <= sb.tol:
        base["error"] = f"dispatcher output wrong (relative error {base['rel_err']:.3g})"
    fns: dict[str, choices.GemmFn] = {"torch": choices.torch_choice(layout)}
    lt_names: list[str] = []  # the cuBLASLt baseline's choices, the heuristic's first first
    heuristic = ""
    if settings.cublaslt and device == "cuda":
        lt = families.named("cublaslt")
        try:
            lt_names = lt.configs(Problem(shape, layout, device, (a0, b0)), 0, settings.lt_variants)
            heuristic = lt_names[0] if lt_names else ""
        except Exception as exc:
            base["cublaslt_error"] = f"{type(exc).__name__}: {exc}"[:300]
        refused = {}
        for n in lt_names:
            try:
                fns[n] = lt.build(n, layout, a0, b0)
                if not sb.verify(n, fns[n]) <= sb.tol:
                    refused[n] = "wrong result"
            except Exception as exc:  # a reconfiguration cuBLASLt refuses here is left out, and said
                refused[n] = f"{type(exc).__name__}: {exc}"[:200]
        lt_names = [n for n in lt_names if n not in refused]
        if refused:
            base["cublaslt_refused"] = refused
    if compile_it:
        bview = (lambda b: b) if layout == "nn" else (lambda b: b.t())
        # a fresh start per shape: Dynamo caches on this lambda's code, and after 8 shapes it stops
        # compiling (recompile_limit) and runs it eagerly -- torch.matmul reported as torch.compile
        torch._dynamo.reset()
        fns["compile"] = torch.compile(lambda a, b: torch.matmul(a, bview(b)), mode=COMPILE_MODE, dynamic=False)
        try:
            base["compile_rel_err"] = sb.verify("compile", fns["compile"])
        except Exception as exc:  # inductor failures are reported, not fatal
            base["compile_error"] = f"{type(exc).__name__}: {exc}"[:300]
            del fns["compile"]

    # cuBLASLt autotuning: screen every algorithm, re-time the best two (offline)
    lt_best = None
    if lt_names:
        screened = {n: sb.time(fns[n], settings.screen, rng=rng)["ms"] for n in lt_names}
        lt_best = sorted(screened, key=screened.__getitem__)[:2]

    rows: dict[str, dict[str, Any]] = {}
    other, other_fn = sb.other_layout()
    for mode in settings.modes:
        budget = settings.final if mode == "offline" else settings.server
        timed = {n: fns[n] for n in ["torch", "compile", *dict.fromkeys([heuristic, *(lt_best or [])])]
                 if n in fns and (n != heuristic or lt_best)}
        if mode == "offline":
            timed[f"torch_{other}"] = other_fn
        if choice != "torch":
            timed["warpforge"] = ours
        # all in interleaved rounds, so clock and temperature drift hits every column alike
        t = sb.time_many(timed, budget, mode, rng)
        row = dict(base)
        row["torch_ms"], row["torch_iqr_ms"] = t["torch"]["ms"], t["torch"]["iqr_ms"]
        if mode == "offline":
            row[f"torch_{other}_ms"] = t[f"torch_{other}"]["ms"]
            row[f"torch_{layout}_ms"] = row["torch_ms"]
            row["torch_best_layout_ms"] = min(row["torch_ms"], row[f"torch_{other}_ms"])
        if lt_best:
            lt_t = {n: t[n] for n in t if n in lt_names}
            row["cublaslt_heuristic_ms"] = lt_t[heuristic]["ms"]
            winner = min(lt_t, key=lambda n: lt_t[n]["ms"])
            row["cublaslt_autotuned_ms"], row["cublaslt_autotuned_choice"] = lt_t[winner]["ms"], winner
        else:
            row["cublaslt_heuristic_ms"] = row["cublaslt_autotuned_ms"] = None
        row["compile_ms"] = t["compile"]["ms"] if "compile" in t else None
        if choice == "torch":
            row["warpforge_ms"], row["warpforge_iqr_ms"] = row["torch_ms"], row["torch_iqr_ms"]
            row["warpforge_latency_ms"] = t["torch"]["host_ms"]
        else:
            w = t["warpforge"]
            row["warpforge_ms"], row["warpforge_iqr_ms"], row["warpforge_latency_ms"] = w["ms"], w["iqr_ms"], w["host_ms"]
        row["torch_latency_ms"] = t["torch"]["host_ms"]
        row["speedup_vs_torch"] = _ratio(row["torch_ms"], row["warpforge_ms"])
        row["speedup_vs_torch_best_layout"] = _ratio(row.get("torch_best_layout_ms"), row["warpforge_ms"])
        row["speedup_vs_cublaslt_heuristic"] = _ratio(row["cublaslt_heuristic_ms"], row["warpforge_ms"])
        row["speedup_vs_cublaslt_autotuned"] = _ratio(row["cublaslt_autotuned_ms"], row["warpforge_ms"])
        row["speedup_vs_compile"] = _ratio(row["compile_ms"], row["warpforge_ms"])
        rows[mode] = row
    return rows


def bench(shapes: list[GemmShape], set_name: str, layout: str, device: str, out_dir: Path, settings: BenchSettings,
          planned: int, on_shape: Callable[[GemmShape, dict[str, Any] | None], None] | None = None) -> list[Path]:
    """Benchmark `shapes`, writing one results file per mode after every shape; returns the paths."""
    gpu = device_name(device)
    date = time.strftime("%Y-%m-%d")
    online = dispatch.online_enabled()
    paths = {m: results_path(out_dir, gpu, set_name, m, date, online) for m in settings.modes}
    table = dispatch.table_for(torch.device(device)) if device == "cuda" else None
    docs: dict[str, dict[str, Any]] = {}
    for mode, path in paths.items():
        old = _load(path)
        docs[mode] = old if old and old.get("gpu") == gpu and old.get("layout") == layout else {
            "gpu": gpu, "set": set_name, "mode": mode, "online": online, "layout": layout, "date": date, "versions": versions(),
            "table": table.path if table else None,
            "method": {"timing": "warpforge.evaluate.bench.time_calls", "mode": mode, "l2": "read-flush before each call",
                       "statistic": "median device time between CUDA events", "data": "fresh normal random operands",
                       "budget": (settings.final if mode == "offline" else settings.server).calls(),
                       "when_choice_is_torch": "warpforge_ms = torch_ms (the dispatcher runs the same kernel)",
                       "unmeasured_shapes": ("tuned on first use with torch.matmul, cuBLASLt and the nearest tuned "
                                             "shape's kernel (WARPFORGE_GEMM_ONLINE)" if online else
                                             "the nearest tuned shape's Triton or mma kernel within 2x, else torch.matmul")},
            "shapes": []}
    done = {(r["M"], r["N"], r["K"], r["dtype"]) for r in docs[settings.modes[0]]["shapes"]}
    rng = random.Random(settings.seed)
    # torch.compile takes tens of seconds per shape: only on `compile_shapes` shapes spread over the list
    n_compile = min(settings.compile_shapes, len(shapes))
    compile_at = {int((j + 0.5) * len(shapes) / n_compile) for j in range(n_compile)} if n_compile else set()
    for i, shape in enumerate(shapes):
        if (shape.M, shape.N, shape.K, shape.dtype) in done:
            if on_shape:
                on_shape(shape, None)
            continue
        try:
            with heap_frozen():  # the shape's dozens of timing runs scan only what it allocates
                rows = bench_shape(shape, layout, device, settings, i in compile_at, rng)
        except RuntimeError as exc:  # out of GPU memory on this shape: said, left out, tried again on a re-run
            print(f"warpforge gemm bench: {shape.M}x{shape.N}x{shape.K} failed and is left out "
                  f"({type(exc).__name__}: {str(exc)[:200]})", file=sys.stderr)
            if on_shape:
                on_shape(shape, None)
            continue
        finally:
            dispatch.forget_kernels()  # this shape's kernels, plans and operands
            release_memory(device)
        for mode, row in rows.items():
            docs[mode]["shapes"].append(row)
            docs[mode]["sweep"] = {"planned": planned, "measured": len(docs[mode]["shapes"]),
                                   "note": "shapes picked evenly over the set sorted by FLOPs" if planned > len(shapes) else "the whole set"}
            _save(paths[mode], docs[mode])
        if on_shape:
            on_shape(shape, rows[settings.modes[0]])
    return list(paths.values())
