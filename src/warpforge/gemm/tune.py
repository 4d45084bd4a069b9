"""Per-shape GEMM tuner: verify every choice, time the baselines and our kernels with the
evaluator's timing function, keep a kernel only when it beats the best baseline beyond noise.

For one shape (and layout):
1. fresh normal random operands (two sets) and an fp32 reference (TF32 off) per set;
2. baselines (the families of families.py that are not ours): torch.matmul in the given layout,
   the other layout (reported, not dispatchable: the caller's layout is what it is),
   zero-padding to multiples of 8 when K or N is not, and every algorithm cuBLASLt's heuristic
   returns (nvmath-python), and the heuristic's first `lt_variants` algorithms reconfigured
   within their capabilities (split-K, CTA swizzling);
3. our kernels: what each family named in `families` lists for the shape (`GemmFamily.configs`:
   Triton's and mma's pruned spaces, CUTLASS's on Hopper), each verified on both input sets before
   it is timed (relative L2 error below `choices.tolerance`, edge tiles included whenever the tile
   does not divide the shape), and the run-time variants of the fastest (`variants`: CUTLASS's
   raster orders and swizzles);
4. a short screen (`SCREEN` budget) of everything (our kernels after a first look, `PRESCREEN`,
   that leaves out those over `drop_slower_than` times the best baseline), then the leaders re-timed with the harness's
   full budget (`FINAL`); every time is `evaluate.bench.time_calls`: L2 flushed by a read before
   each call, device time between events behind a spin kernel, medians and IQRs;
5. the choice: cuBLASLt or padding replace torch.matmul only when faster beyond the measured
   spread (`metrics.faster_beyond_noise`), and our fastest kernel replaces that best baseline
   only under the same rule. So a table built here never sends a measured shape to something
   slower than torch.matmul, up to noise.

Results are appended to a JSONL file one shape at a time (flushed and fsynced), so a crashed or
interrupted sweep resumes where it stopped; `build_table` turns the records into the
dispatcher's table.
"""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from warpforge import metrics
from warpforge.config import TimingBudget
from warpforge.errors import UsageError
from warpforge.evaluate.bench import heap_frozen, summarize, time_calls
from warpforge.gemm import choices, families
from warpforge import jsonl
from warpforge.gemm.family import GemmFamily, Problem
from warpforge.gemm.file_choice import choice_for
from warpforge.gemm.shapes import GemmShape, gpu_slug

SCREEN = TimingBudget(warmup_ms=5.0, rep_ms=15.0, min_reps=5, max_reps=60)
# a first look at each of our kernels: one clearly out of the running (slower than
# `drop_slower_than` times the best baseline here) is not screened further
PRESCREEN = TimingBudget(warmup_ms=1.0, rep_ms=3.0, min_reps=3, max_reps=10)
FINAL = TimingBudget()  # the evaluator's own default budget (EvalConfig().timing): 25 ms warm-up, 100 ms of calls
# the default families (families.searched() lists every one); cutlass (CUTLASS sm90 wgmma + TMA
# kernels) is asked for by name: measured on 32 sampled shapes only so far, and each configuration
# is a minute of nvcc (docs/gemm.md)
OURS = ("triton", "mma")


@dataclass
class TuneSettings:
    families: tuple[str, ...] = OURS
    candidates: tuple[str, ...] = ()
    """candidate kernel files (file:<path> choices) tried on every shape, e.g. an optimisation loop's best"""
    kernels: tuple[str, ...] = ()
    """our kernels by choice name, tried on every shape beside the families' (the dispatcher's tuning
    on first use: the nearest measured shape's kernel)"""
    cublaslt: bool = True
    lt_variants: int = 2
    """reconfigure the heuristic's first N cuBLASLt algorithms too (split-K, CTA swizzling; 0: none)"""
    cutlass_variants: int = 2
    """screen the N fastest CUTLASS configurations again with other raster orders and swizzles (0: none)"""
    finalists: int = 3
    max_configs: int = 24
    seed: int = 0
    screen: TimingBudget = SCREEN
    prescreen: TimingBudget | None = PRESCREEN
    """our kernels' first look (None: screen every one in full)"""
    final: TimingBudget = FINAL
    drop_slower_than: float = 1.5
    """screened choices slower than this multiple of the best screened baseline are not re-timed"""

    def times(self, family: GemmFamily) -> bool:
        """Whether this family is timed: a baseline unless switched off (cublaslt=False), one of ours
        when `families` names it."""
        if family.ours:
            return family.name in self.families
        return self.cublaslt or family.name != "cublaslt"

    def variants_for(self, family: GemmFamily) -> int:
        """The run-time variants asked of a family: `lt_variants` of cuBLASLt, `cutlass_variants` of CUTLASS."""
        return {"cublaslt": self.lt_variants, "cutlass": self.cutlass_variants}.get(family.name, 0)


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(torch.cuda.current_device())
    return "cpu"


class ShapeBench:
    """Operands, references and timing for one (shape, layout) on one device."""

    def __init__(self, shape: GemmShape, layout: str, device: str, seed: int = 0, n_sets: int = 2) -> None:
        self.shape, self.layout, self.device = shape, layout, device
        self.sets = [choices.make_inputs(shape, layout, device, seed * 1000 + i) for i in range(n_sets)]
        self.refs = [choices.reference(a, b, layout) for a, b in self.sets]
        self.tol = choices.tolerance(shape.dtype)

    def fn(self, name: str) -> choices.GemmFn:
        a, b = self.sets[0]
        return choices.make_choice(name, self.layout, a, b)

    def verify(self, name: str, fn: choices.GemmFn | None = None) -> float:
        """Largest relative error over the input sets (inf for NaN / wrong shape)."""
        fn = fn or self.fn(name)
        worst = 0.0
        for (a, b), ref in zip(self.sets, self.refs):
            worst = max(worst, choices.rel_error(fn(a, b), ref))
        return worst

    def time(self, fn: choices.GemmFn, budget: TimingBudget, mode: str = "offline",
             rng: random.Random | None = None) -> dict[str, Any]:
        # every choice runs on the current stream (our kernels, cuBLAS, cuBLASLt, Inductor's), so
        # the end event goes on that stream: device time without the host's sync round trip
        stats = time_calls(lambda args: fn(args[0], args[1]), lambda i: list(self.sets[i % len(self.sets)]),
                           len(self.sets), self.device, mode=mode, rng=rng, trusted_stream=True, budget=budget)
        return {"ms": stats.median_ms, "iqr_ms": stats.iqr_ms, "n": stats.n, "host_ms": stats.host_median_ms}

    def time_many(self, fns: dict[str, choices.GemmFn], budget: TimingBudget, mode: str = "offline",
                  rng: random.Random | None = None, rounds: int = 3) -> dict[str, dict[str, Any]]:
        """Time several choices in `rounds` interleaved rounds (shuffled order each round), each
        round a share of `budget`. Clocks and temperature drift over a sweep (the same cuBLAS
        kernel read 1.07 and 1.30 ms a minute apart on an H100); interleaving spreads the drift
        over every choice instead of handing it to whichever was timed last."""
        rng = rng or random.Random()
        share = budget.share(rounds)
        samples: dict[str, list[float]] = {n: [] for n in fns}
        hosts: dict[str, list[float]] = {n: [] for n in fns}
        order = list(fns)
        for _ in range(rounds):
            rng.shuffle(order)
            for name in order:
                fn = fns[name]
                stats = time_calls(lambda args: fn(args[0], args[1]), lambda i: list(self.sets[i % len(self.sets)]),
                                   len(self.sets), self.device, mode=mode, rng=rng, trusted_stream=True, budget=share)
                samples[name] += stats.samples_ms
                hosts[name].append(stats.host_median_ms)
        out = {}
        for name in fns:
            s = summarize(samples[name], hosts[name])
            out[name] = {"ms": s.median_ms, "iqr_ms": s.iqr_ms, "n": s.n, "host_ms": s.host_median_ms}
        return out

    def other_layout(self) -> tuple[str, choices.GemmFn]:
        """torch.matmul with B stored the other way round (a copy made now, outside any timing)."""
        other = "nt" if self.layout == "nn" else "nn"
        copies = {b.data_ptr(): b.t().contiguous() for _, b in self.sets}
        fn = choices.torch_choice(other)
        return other, lambda a, b: fn(a, copies[b.data_ptr()])


def our_choices(shape: GemmShape, layout: str, device: str, settings: TuneSettings) -> list[str]:
    """Our kernels for this shape: the configurations of each family asked for (at most `max_configs`
    of each; mma takes a third as many), then `settings.kernels` and the candidate files."""
    problem = Problem(shape, layout, device)
    names: list[str] = []
    for family in families.REGISTERED:
        if family.ours and settings.times(family):
            names += [n for n in family.configs(problem, settings.max_configs, settings.variants_for(family))
                      if family.why_not(n, shape, layout, device) is None]
    names += [n for n in settings.kernels if n not in names]
    return names + [choice_for(p) for p in settings.candidates]


def prebuild(names: list[str], dtype: str, layout: str) -> None:
    """Let each family compile its choices among `names` ahead, in parallel (CUTLASS: one nvcc per
    core, a minute each, once: they are cached on disk)."""
    for family in families.REGISTERED:
        mine = [n for n in names if family.owns(n)]
        if mine:
            family.prebuild(mine, dtype, layout)


def variants(screened: dict[str, dict[str, Any]], problem: Problem, settings: TuneSettings) -> list[str]:
    """More choices after the screen: each of our families' run-time variants of its fastest screened
    choices (CUTLASS: the `cutlass_variants` fastest configurations with other raster orders and
    swizzles, and the fastest stream-K configuration's split-K factors)."""
    found: list[str] = []
    for family in families.REGISTERED:
        count = settings.variants_for(family)
        if family.ours and count > 0:
            ranked = sorted((n for n in screened if family.owns(n)), key=lambda n: screened[n]["ms"])
            found += family.variants(ranked, problem, count)
    return found


def record_head(shape: GemmShape, layout: str, device: str) -> dict[str, Any]:
    """What every tuning record of a shape starts with, tuned or failed."""
    return {"M": shape.M, "N": shape.N, "K": shape.K, "dtype": shape.dtype, "layout": layout, "source": shape.source,
            "gpu": device_name(device), "torch": torch.__version__}


def tune_shape(shape: GemmShape, layout: str, device: str, settings: TuneSettings) -> dict[str, Any]:
    """Measure one shape; the record `build_table` and the benchmark read. A shape makes 30-60
    timing runs, each starting with a garbage collection: with the heap frozen for the shape
    (`heap_frozen`) they scan only what the shape allocated. Without it the collections were
    most of a shape's 3-5 s on an H100 (2026-11-26 CUTLASS sample: 0.01-0.8 s of it timed calls)."""
    with heap_frozen():
        return _tune_shape(shape, layout, device, settings)


def _tune_shape(shape: GemmShape, layout: str, device: str, settings: TuneSettings) -> dict[str, Any]:
    started = time.perf_counter()
    rng = random.Random(settings.seed)
    sb = ShapeBench(shape, layout, device, settings.seed)
    record: dict[str, Any] = {**record_head(shape, layout, device), "baselines": {}, "candidates": []}
    screened: dict[str, dict[str, Any]] = {}  # name -> screen timing, for everything that verified
    fns: dict[str, choices.GemmFn] = {}

    def screen(name: str, kind: str) -> None:
        entry: dict[str, Any] = {"name": name, "kind": kind}
        try:
            fns[name] = sb.fn(name)
            entry["rel_err"] = sb.verify(name, fns[name])
            if not entry["rel_err"] <= sb.tol:
                entry["status"] = "incorrect"
            else:
                entry["status"] = "ok"
                base = min((s["ms"] for n, s in screened.items() if not _is_ours(n)), default=None)
                if kind == "ours" and settings.prescreen and base:
                    entry["prescreen"] = sb.time(fns[name], settings.prescreen, rng=rng)
                    if entry["prescreen"]["ms"] > settings.drop_slower_than * base:
                        entry["note"] = f"left after its first look: over {settings.drop_slower_than:g}x the best baseline"
                if "note" not in entry:
                    entry["screen"] = screened[name] = sb.time(fns[name], settings.screen, rng=rng)
        except Exception as exc:  # a kernel that does not compile or launch is recorded, not fatal
            entry["status"] = "error"
            entry["error"] = f"{type(exc).__name__}: {exc}"[:400]
        record["candidates"].append(entry)

    problem = Problem(shape, layout, device, operands=sb.sets[0])
    baseline_choices: dict[str, list[str]] = {}  # family -> its choices, in the registry's order (torch first)
    for family in families.REGISTERED:
        if family.ours or not settings.times(family):
            continue
        try:
            names = family.configs(problem, settings.max_configs, settings.variants_for(family))
        except Exception as exc:  # no nvmath, or cuBLASLt refusing the problem: said in the record
            record[f"{family.name}_error"] = f"{type(exc).__name__}: {exc}"[:400]
            continue
        baseline_choices[family.name] = names
        for name in names:
            screen(name, "baseline")
        if names:
            try:
                record.update(family.describe(problem, names))
            except Exception as exc:
                record[f"{family.name}_error"] = f"{type(exc).__name__}: {exc}"[:400]
    ours = our_choices(shape, layout, device, settings)
    prebuild(ours, shape.dtype, layout)
    for name in ours:
        screen(name, "ours")
    for name in variants(screened, problem, settings):
        screen(name, "ours")
    if "torch" not in screened:
        raise RuntimeError(f"torch.matmul itself failed on {shape}: {record['candidates'][0]}")

    # finalists: the two fastest screened choices of each baseline family (torch; padding; cuBLASLt), our best few
    def ranked(names: Iterable[str]) -> list[str]:
        return sorted((n for n in names if n in screened), key=lambda n: screened[n]["ms"])

    base_screen = min(s["ms"] for n, s in screened.items() if not _is_ours(n))
    lt_names = baseline_choices.get("cublaslt", [])
    lt_ranked = ranked(lt_names)
    ours_ranked = ranked(n for n in screened if _is_ours(n) and screened[n]["ms"] < settings.drop_slower_than * base_screen)
    finalists = [n for names in baseline_choices.values() for n in ranked(names)[:2]] + ours_ranked[: settings.finalists]
    # the other layout: what cuBLAS does with B stored the other way round (reported, not dispatchable)
    other, fns["torch_other_layout"] = sb.other_layout()
    final = sb.time_many({n: fns[n] for n in finalists + ["torch_other_layout"]}, settings.final, rng=rng)
    record["baselines"]["torch_other_layout"] = {"layout": other, **final.pop("torch_other_layout")}
    for entry in record["candidates"]:
        if entry["name"] in final:
            entry["final"] = final[entry["name"]]

    best_base = "torch"
    for name in sorted((n for n in final if not _is_ours(n) and n != "torch"), key=lambda n: final[n]["ms"]):
        if _beats(final[name], final[best_base]):
            best_base = name
    choice = best_base
    ours_final = sorted((n for n in final if _is_ours(n)), key=lambda n: final[n]["ms"])
    if ours_final and _beats(final[ours_final[0]], final[best_base]):
        choice = ours_final[0]

    record["baselines"]["torch"] = final["torch"]
    if "torch_padded" in final:
        record["baselines"]["torch_padded"] = final["torch_padded"]
    if lt_ranked:
        # heuristic = the first algorithm cuBLASLt returns; autotuned = the fastest of all it returns
        heuristic = lt_names[0]
        heur = final.get(heuristic) or sb.time(fns[heuristic], settings.final, rng=rng)
        record["baselines"]["cublaslt_heuristic"] = {**heur, "choice": heuristic}
        lt_best = min((n for n in final if n in lt_names), key=lambda n: final[n]["ms"])
        record["baselines"]["cublaslt_autotuned"] = {**final[lt_best], "choice": lt_best}
    record.update(choice=choice, choice_ms=final[choice]["ms"], choice_iqr_ms=final[choice]["iqr_ms"],
                  best_baseline=best_base, best_baseline_ms=final[best_base]["ms"],
                  tuned_at=time.strftime("%Y-%m-%dT%H:%M:%S"), seconds=round(time.perf_counter() - started, 2))
    return record


def _is_ours(name: str) -> bool:
    family = families.find(name)
    return family is not None and family.ours


def _beats(fast: dict[str, Any], slow: dict[str, Any]) -> bool:
    return metrics.faster_beyond_noise(fast["ms"], fast["iqr_ms"], slow["ms"], slow["iqr_ms"])


# ---------------------------------------------------------------- sweeps, records, tables

def record_key(r: dict[str, Any]) -> tuple[int, int, int, str, str]:
    return (int(r["M"]), int(r["N"]), int(r["K"]), str(r["dtype"]), str(r["layout"]))


def sample(shapes: list[GemmShape], n: int | None) -> list[GemmShape]:
    """`n` shapes spread evenly over the set sorted by FLOPs (deterministic), or all of them."""
    if not n or n >= len(shapes):
        return list(shapes)
    ordered = sorted(shapes, key=lambda s: (s.flops, s.M, s.N, s.K))
    step = len(ordered) / n
    return [ordered[min(int(i * step + step / 2), len(ordered) - 1)] for i in range(n)]


def record_files(folder: Path) -> list[Path]:
    """tune.jsonl and the per-GPU shard files (tune.shard0of4.jsonl ...) of one output folder."""
    return sorted(folder.glob("tune*.jsonl"))


def read_folder(folder: Path) -> list[dict[str, Any]]:
    return [r for path in record_files(folder) for r in jsonl.read(path)]


def sweep(shapes: Iterable[GemmShape], layout: str, device: str, records_path: Path,
          settings: TuneSettings) -> Iterator[tuple[GemmShape, dict[str, Any] | None]]:
    """Tune each shape not yet recorded in `records_path`'s folder (by any shard); yields
    (shape, record or None when skipped)."""
    gpu = device_name(device)  # records of another GPU (copied in) do not count; a failed shape is tried again
    done = {record_key(r) for r in read_folder(records_path.parent) if "choice" in r and r.get("gpu") == gpu}
    for shape in shapes:
        if (shape.M, shape.N, shape.K, shape.dtype, layout) in done:
            yield shape, None
            continue
        try:
            record = tune_shape(shape, layout, device, settings)
        except RuntimeError as exc:  # out of GPU memory, or torch.matmul itself failing: this shape, not the sweep
            record = {**record_head(shape, layout, device), "error": f"{type(exc).__name__}: {exc}"[:600],
                      "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        finally:
            release_memory(device)
        jsonl.append(records_path, [record])
        yield shape, record


def release_memory(device: str) -> None:
    """Give back what one shape's measurement held: the cached cuBLASLt plans (with the operands,
    outputs and workspaces they keep) and the CUDA allocator's free blocks. Without it a sweep's
    memory grows with every large shape (an H200 ran out at 137 GiB on the llm set)."""
    families.forget()
    gc.collect()
    if device == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()


def build_table(records: list[dict[str, Any]], gpu: str) -> dict[str, Any]:
    """The dispatcher's table: one entry per measured (dtype, layout, M, N, K), newest record wins;
    an entry whose choice is one of our kernels names the fastest baseline as its `fallback`.
    Its `torch` is the version(s) the records were measured with (not the builder's; records
    written before they carried one leave it out)."""
    entries: dict[tuple[int, int, int, str, str], dict[str, Any]] = {}
    measured_with: set[str] = set()
    for r in records:
        if r.get("gpu") != gpu or "choice" not in r:
            continue
        if r.get("torch"):
            measured_with.add(r["torch"])
        entries[record_key(r)] = {"M": r["M"], "N": r["N"], "K": r["K"], "dtype": r["dtype"], "layout": r["layout"],
                                  "choice": r["choice"], "choice_ms": r["choice_ms"],
                                  "torch_ms": r["baselines"]["torch"]["ms"]}
        if _is_ours(r["choice"]) and r.get("best_baseline") not in (None, "torch"):
            # what runs where our kernel cannot (a CUTLASS library not built here, a file gone)
            entries[record_key(r)]["fallback"] = r["best_baseline"]
        family = families.find(r["choice"])
        if family is not None:  # e.g. which cuBLASLt algorithm the index named where it was measured
            entries[record_key(r)].update(family.table_entry(r["choice"], r))
    if not entries:
        raise UsageError(f"no tuning records for GPU {gpu!r}: run `warpforge gemm tune` on it first")
    return {"gpu": gpu, "gpu_slug": gpu_slug(gpu), "created": time.strftime("%Y-%m-%d"),
            "torch": ", ".join(sorted(measured_with)) or None, "entries": sorted(entries.values(), key=lambda e: (e["dtype"], e["layout"], e["M"], e["N"], e["K"]))}
