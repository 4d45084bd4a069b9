"""The evaluator: static -> reference -> compile -> verify -> bench -> profile.

`evaluate(task, candidate, config)` is the only entry point. It parses the candidate here
(static.py), runs the task in a reference child (reference.py), then the candidate in a
separate sandboxed child (worker.py) and decides the verdict in this process from the
evidence the children send. The candidate never sees the reference outputs, and nothing
it prints or does to its own process can make it `correct`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any, cast

import torch

from warpforge import metrics
from warpforge.candidate import Candidate, EvalResult, Stage, Status, Timing
from warpforge.config import EvalConfig
from warpforge.errors import HarnessError, TaskError
from warpforge.evaluate import compile as compile_mod
from warpforge.evaluate.inputs import fingerprint_positions
from warpforge.evaluate.sandbox import Child, ChildOutcome, run_child
from warpforge.evaluate.static import check_source
from warpforge.evaluate.verify import (Comparison, RefSummary, Tolerance, compare, compare_fingerprint,
                                       summarize_reference, tolerance_for)
from warpforge.task import Task

FINGERPRINT_POSITIONS = 32
SPEED_OF_LIGHT_SLACK = 1.5
# repeat calls (values seen before, new addresses) this many times faster than first-seen values
# at their best: a content cache. Honest kernels do not care which values they were given before.
CONTENT_CACHE_RATIO = 3.0  # a result this many times faster than the datasheet roofline is impossible


@dataclasses.dataclass
class _Reference:
    outputs: list[list[torch.Tensor]]
    dtypes: list[torch.dtype]
    tolerances: list[Tolerance]
    message: dict[str, Any]
    baselines: dict[str, Timing]
    baseline_notes: list[str]
    seconds: float
    verify_sets: int


def evaluate(task: Task, candidate: Candidate, config: EvalConfig) -> EvalResult:
    cfg = config.resolved()
    assert cfg.device is not None and cfg.size is not None
    base = EvalResult("crashed", "", "static", task=task.name, candidate_id=candidate.id, config=cfg.to_dict())
    allow_tf32 = cfg.allow_tf32 or bool(task.metadata.get("allow_tf32"))
    report = check_source(candidate.source, allow_tf32)
    if not cfg.static_checks:
        report = dataclasses.replace(report, rejected=None)
    if report.syntax_error:
        return _with(base, "compile_error", f"the candidate cannot be loaded: {report.syntax_error}", "static")
    if report.rejected:
        return _with(base, "rejected", f"rejected before running: the candidate {report.rejected}", "static")
    # tmpfs when there is one: GPU-sized inputs and outputs cross between processes as files
    shm = "/dev/shm" if _free_gb("/dev/shm") > 16 else None
    tmp = Path(tempfile.mkdtemp(prefix="warpforge-", dir=shm))
    try:
        return _evaluate_in(tmp, task, candidate, cfg, allow_tf32, report.kernel_names, base)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _with(result: EvalResult, status: Status, reason: str, stage: str, **changes: Any) -> EvalResult:
    """A copy of `result` with a verdict; every verdict below is made this way."""
    return dataclasses.replace(result, status=status, reason=reason, stage=cast(Stage, stage), **changes)


def _free_gb(path: str) -> float:
    try:
        st = os.statvfs(path)
    except OSError:
        return 0.0
    return st.f_bavail * st.f_frsize / 2**30 if os.access(path, os.W_OK) else 0.0


def _bench_args(cfg: EvalConfig) -> dict[str, Any]:
    return {"warmup_ms": cfg.warmup_ms, "rep_ms": cfg.rep_ms, "min_reps": cfg.min_reps, "max_reps": cfg.max_reps,
            "mode": cfg.mode, "gap_ms": list(cfg.server_gap_ms)}


def _child_env(cfg: EvalConfig, source: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(compile_mod.cache_env(cfg.cache_dir, source, os.environ.get("TORCH_CUDA_ARCH_LIST", "")))
    if cfg.device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # Triton kernels run on the CPU through its interpreter
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _evaluate_in(tmp: Path, task: Task, candidate: Candidate, cfg: EvalConfig, allow_tf32: bool,
                 kernel_names: tuple[str, ...], base: EvalResult) -> EvalResult:
    workdir = tmp / "work"
    workdir.mkdir()
    init_seed = secrets.randbits(31)
    # the candidate process starts now and imports torch while the reference runs; it reads
    # nothing of the candidate until it is sent its spec, after the reference outputs are gone
    worker = Child("warpforge.evaluate.worker", [], env=_child_env(cfg, candidate.source), cwd=str(workdir),
                   output_limit_bytes=cfg.output_limit_kb * 1024)
    try:
        reference = _run_reference(tmp, workdir, task, cfg, allow_tf32, init_seed, worker)
    except BaseException:
        worker.kill()
        raise
    hardware = reference.message.get("hardware", {})
    base = dataclasses.replace(base, hardware=hardware,
                               tolerance=reference.tolerances[0].to_dict() if reference.tolerances else {})
    numels = [int(o.numel()) for o in reference.outputs[0]]
    positions = [fingerprint_positions(n, FINGERPRINT_POSITIONS, secrets.randbits(31)).tolist() for n in numels]
    out_bytes = sum(o.numel() * d.itemsize for o, d in zip(reference.outputs[0], reference.dtypes))
    candidate_path = workdir / "candidate.py"
    candidate_path.write_text(candidate.source)
    spec = {
        "candidate_path": str(candidate_path), "inputs_path": str(workdir / "inputs.pt"), "workdir": str(workdir),
        "device": cfg.device, "init_seed": init_seed, "positions": positions, "bench_seed": secrets.randbits(31),
        "verify_sets": cfg.trials,
        "poison_bytes": int(min(4 * out_bytes + (64 << 20), 2 << 30 if cfg.device == "cuda" else 256 << 20)),
        "bench_args": _bench_args(cfg), "profile": cfg.profile and cfg.bench, "kernel_names": list(kernel_names),
    }
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(spec))
    verdict: dict[str, Any] = {}

    def on_message(message: dict[str, Any]) -> str | None:
        if message["type"] != "verified" or "comparison" in verdict:
            return None
        verdict["comparison"] = _compare_trials(message, reference, cfg.device or "cpu")
        return "bench" if verdict["comparison"].ok and cfg.bench else "stop"

    worker.send(str(spec_path))
    outcome = worker.wait(timeout_s=cfg.timeout_s, mem_limit_mb=cfg.mem_limit_gb * 1024, on_message=on_message)
    return _decide(outcome, verdict, reference, positions, cfg, base)


def _run_reference(tmp: Path, workdir: Path, task: Task, cfg: EvalConfig, allow_tf32: bool, init_seed: int,
                   worker: Child) -> _Reference:
    reference_path = tmp / "reference.pt"
    spec = {
        "task_path": str(task.path), "sizes": task.sizes(cfg.size or ""), "device": cfg.device, "workdir": str(workdir),
        "reference_path": str(reference_path), "init_seed": init_seed, "allow_tf32": allow_tf32,
        # the trials, then input sets used only by timed calls (never seen during verification)
        "trial_seeds": [secrets.randbits(31) for _ in range(cfg.trials + (cfg.unseen_bench_sets if cfg.bench else 0))],
        "bench": cfg.bench,
        "compile_baseline": cfg.compile_baseline, "bench_args": _bench_args(cfg), "task_hash": task.source_hash,
        "baseline_cache_dir": str(Path(cfg.cache_dir) / "baselines") if cfg.reuse_baselines else "",
    }
    spec_path = tmp / "reference_spec.json"
    spec_path.write_text(json.dumps(spec))

    def on_message(message: dict[str, Any]) -> str | None:
        if message["type"] != "reference":
            return None
        # time the baselines only once the pre-started candidate process has finished its imports
        # and gone idle: its start-up must not slow the reference down
        worker.wait(timeout_s=120, mem_limit_mb=cfg.mem_limit_gb * 1024, until="ready")
        return "time"

    outcome = run_child("warpforge.evaluate.reference", [str(spec_path)], timeout_s=cfg.reference_timeout_s,
                        mem_limit_mb=max(cfg.mem_limit_gb, 8) * 1024 * 4, output_limit_bytes=cfg.output_limit_kb * 1024,
                        env=_child_env(cfg, ""), on_message=on_message)
    by_type = {m["type"]: m for m in outcome.messages}
    if "task_error" in by_type:
        raise TaskError(by_type["task_error"]["message"])
    if "reference" not in by_type or not reference_path.exists():
        why = "timed out" if outcome.timed_out else f"exited with {outcome.returncode}"
        detail = outcome.output[-3000:] if os.environ.get("WARPFORGE_DEBUG") else \
            compile_mod.summarize_errors(outcome.output, 4)
        raise HarnessError(f"the reference process for {task.name} {why} before producing outputs: "
                           f"{detail or 'no output'}")
    data = torch.load(reference_path, weights_only=True)
    reference_path.unlink()  # the candidate must never find the reference outputs on disk
    dtypes = [getattr(torch, d.removeprefix("torch.")) for d in data["dtypes"]]
    worst = [tuple(max(errs[j][k] for errs in data["native_errors"]) for k in (0, 1)) for j in range(len(dtypes))]
    tolerances = [tolerance_for(d, task.metadata, allow_tf32, (w[0], w[1])) for d, w in zip(dtypes, worst)]
    baselines = {m["name"]: Timing.from_dict(m["timing"]) for m in outcome.messages if m["type"] == "baseline"}
    notes = [f"{m['name']} baseline failed: {m['message']}" for m in outcome.messages if m["type"] == "baseline_error"]
    if any(m.get("cached") for m in outcome.messages if m["type"] == "baseline"):
        notes.append("baseline timings reused from an earlier clean-process measurement on this machine "
                     "(--fresh-baselines to re-measure)")
    if cfg.bench and "eager" not in baselines:
        detail = outcome.output[-3000:] if os.environ.get("WARPFORGE_DEBUG") else \
            compile_mod.summarize_errors(outcome.output, 4)
        why = f"timed out after {cfg.reference_timeout_s:g} s" if outcome.timed_out else "failed"
        raise HarnessError(f"timing the reference of {task.name} {why}: {detail}")
    return _Reference(data["outputs"], dtypes, tolerances, by_type["reference"], baselines, notes, outcome.seconds,
                      cfg.trials)


def _compare_trials(message: dict[str, Any], reference: _Reference, device: str) -> Comparison:
    """Compare every trial's outputs with the reference (on the GPU when there is one: GPU-sized
    outputs take seconds to compare in float64 on the CPU). The candidate process is idle meanwhile."""
    worst_abs, worst_l2 = 0.0, 0.0
    files = message.get("files")
    if not isinstance(files, list) or len(files) != reference.verify_sets:
        return Comparison(False, "the candidate process reported the wrong number of trial outputs")
    for i, (path, refs) in enumerate(zip(files, reference.outputs)):
        try:
            outs = torch.load(path, weights_only=True)
        except Exception as exc:
            return Comparison(False, f"trial {i + 1}: the outputs could not be read back ({type(exc).__name__})")
        if not isinstance(outs, list) or len(outs) != len(refs):
            n = len(outs) if isinstance(outs, list) else 1
            return Comparison(False, f"forward() returned {n} outputs, the reference returns {len(refs)}")
        for j, (out, ref) in enumerate(zip(outs, refs)):
            label = "the output" if len(refs) == 1 else f"output {j}"
            if isinstance(out, torch.Tensor):
                out, ref = out.to(device), ref.to(device)
            result = compare(out, ref, reference.dtypes[j], reference.tolerances[j], label)
            worst_abs, worst_l2 = max(worst_abs, result.max_abs_err), max(worst_l2, result.rel_l2_err)
            if not result.ok:
                return Comparison(False, f"trial {i + 1} of {len(files)}: {result.reason}", worst_abs, worst_l2)
    return Comparison(True, f"matches the reference in all {len(files)} trials", worst_abs, worst_l2)


def _stage_seconds(outcome: ChildOutcome) -> dict[str, float]:
    """Seconds from each stage's start to the next message that starts another stage or ends."""
    marks = [(m["name"], m["_received"]) for m in outcome.messages
             if m["type"] == "stage" and isinstance(m.get("name"), str) and "_received" in m]
    ends = [m["_received"] for m in outcome.messages if m["type"] in ("done", "rejected", "runtime_error")]
    result: dict[str, float] = {}
    for i, (name, start) in enumerate(marks):
        end = marks[i + 1][1] if i + 1 < len(marks) else (ends[-1] if ends else start)
        result[name] = round(end - start, 3)
    result["candidate_process"] = round(outcome.seconds, 3)
    return result


def _stage_of(outcome: ChildOutcome) -> str:
    stages = [m["name"] for m in outcome.messages if m["type"] == "stage" and isinstance(m.get("name"), str)]
    return stages[-1] if stages else "compile"


def _decide(outcome: ChildOutcome, verdict: dict[str, Any], reference: _Reference, positions: list[list[int]],
            cfg: EvalConfig, base: EvalResult) -> EvalResult:
    by_type: dict[str, dict[str, Any]] = {}
    for m in outcome.messages:
        by_type.setdefault(m["type"], m)
    stage = _stage_of(outcome)
    tail = outcome.output[-4000:]
    common = dataclasses.replace(
        base, output_tail=tail, trials=reference.verify_sets, warnings=tuple(reference.baseline_notes),
        reference=reference.baselines.get("eager"), compiled_reference=reference.baselines.get("torch_compile"),
        stage_seconds={"reference": round(reference.seconds, 3), **_stage_seconds(outcome)})
    comparison: Comparison | None = verdict.get("comparison")
    if comparison is not None:
        common = dataclasses.replace(common, max_abs_err=comparison.max_abs_err, rel_l2_err=comparison.rel_l2_err)
    if outcome.bad_messages or len([m for m in outcome.messages if m["type"] == "verified"]) > 1:
        return _with(common, "rejected", "the candidate wrote to the harness's private channel", stage)
    if "compile_error" in by_type:
        log = by_type["compile_error"].get("trace", "") + "\n" + outcome.output
        summary = compile_mod.summarize_errors(log)
        return _with(common, "compile_error", f"the candidate failed to import or compile: {by_type['compile_error']['message'][:300]}",
                          "compile", compile_log=summary)
    if "rejected" in by_type:
        return _with(common, "rejected", f"rejected: {by_type['rejected']['message']}", stage)
    if outcome.timed_out:
        return _with(common, "timeout", f"killed after {cfg.timeout_s:g} s during the {stage} stage", stage)
    if outcome.out_of_memory:
        return _with(common, "crashed", f"killed during the {stage} stage for using more than {cfg.mem_limit_gb:g} GB of "
                          "host memory", stage)
    if comparison is not None and not comparison.ok:
        return _with(common, "incorrect", comparison.reason, "verify")
    if "runtime_error" in by_type:
        message = by_type["runtime_error"]["message"]
        return _with(common, "runtime_error", f"forward() raised during the {stage} stage: {message[:500]}", stage,
                          compile_log=compile_mod.summarize_errors(by_type["runtime_error"].get("trace", "")))
    if "done" not in by_type or comparison is None:
        how = f"was killed by {outcome.signal_name}" if outcome.signal_name else f"exited with code {outcome.returncode}"
        return _with(common, "crashed", f"the candidate process {how} during the {stage} stage, before the harness "
                          "finished (anything it printed is ignored)", stage)
    if not cfg.bench:
        return _with(common, "correct", comparison.reason + " (not timed)", "verify")
    return _decide_bench(by_type, reference, positions, cfg, common, comparison)


def _decide_bench(by_type: dict[str, dict[str, Any]], reference: _Reference, positions: list[list[int]],
                  cfg: EvalConfig, common: EvalResult, comparison: Comparison) -> EvalResult:
    bench = by_type.get("bench")
    if bench is None:
        return _with(common, "crashed", "the candidate process finished without timing results", "bench")
    summaries: dict[tuple[int, int], RefSummary] = {}
    for index, prints in bench.get("fingerprints", []):
        refs = reference.outputs[int(index)]
        if not isinstance(prints, list) or len(prints) != len(refs):
            return _with(common, "incorrect", "a timed call returned a different number of outputs", "bench")
        for j, fp in enumerate(prints):
            if (int(index), j) not in summaries:
                summaries[int(index), j] = summarize_reference(refs[j], torch.tensor(positions[j], dtype=torch.long))
            problem = compare_fingerprint(fp, summaries[int(index), j], reference.tolerances[j])
            if problem:
                return _with(common, "incorrect", f"{problem} (input set {int(index) + 1}); correct answers only outside "
                                  "timing are not accepted", "bench")
    timing = Timing.from_dict(bench["timing"])
    cached = content_cache_suspected(bench["timing"])
    if cached:
        return _with(common, "rejected", f"rejected: {cached}", "bench", candidate=timing)
    warnings = list(common.warnings)
    if bench.get("native_threads_added"):
        warnings.append(f"{bench['native_threads_added']} native threads appeared during the timed calls")
    roofline = _roofline(reference, timing, cfg)
    kernels = by_type.get("profile", {})
    kernels = {k: v for k, v in kernels.items() if k != "type"}
    result = _with(common, "correct", comparison.reason, "done", candidate=timing, roofline=roofline,
                   kernels=kernels, warnings=tuple(warnings))
    fraction = roofline.get("fraction")
    if isinstance(fraction, float) and fraction > SPEED_OF_LIGHT_SLACK:
        return dataclasses.replace(result, status="rejected", stage="bench", reason=(
            f"measured {timing.median_ms:.4g} ms, {fraction:.1f}x faster than this GPU's speed of light "
            f"({roofline['floor_ms']:.4g} ms): results were cached or work was hidden from the timer"))
    return result


def content_cache_suspected(timing: dict[str, Any]) -> str | None:
    """Why a bench summary looks like a content cache (repeat values much faster), or None."""
    fresh, repeat = timing.get("first_seen_min_ms"), timing.get("repeat_median_ms")
    if isinstance(fresh, (int, float)) and isinstance(repeat, (int, float)) and repeat * CONTENT_CACHE_RATIO < fresh:
        return (f"calls on input values seen before ran in {repeat:.4g} ms, more than {CONTENT_CACHE_RATIO:g}x faster "
                f"than on values seen for the first time ({fresh:.4g} ms at best): results are cached by input content")
    return None


def _roofline(reference: _Reference, timing: Timing, cfg: EvalConfig) -> dict[str, Any]:
    flops, nbytes = reference.message.get("flops"), reference.message.get("bytes")
    info: dict[str, Any] = {"flops": flops, "bytes": nbytes}
    peaks = metrics.peaks_for(str(reference.message.get("hardware", {}).get("gpu", ""))) if cfg.device == "cuda" else None
    if peaks is None:
        return info
    dtype = str(reference.dtypes[0]).removeprefix("torch.") if reference.dtypes else "float32"
    try:
        peak_flops = metrics.peak_flops_for_dtype(peaks, dtype, allow_tf32=cfg.allow_tf32)
    except ValueError:
        peak_flops = None
    floor = metrics.roofline_ms(flops, nbytes, peak_flops, peaks.get("bytes_per_s"))
    if floor is not None and timing.median_ms > 0 and not math.isnan(timing.median_ms):
        info.update(floor_ms=floor, fraction=metrics.roofline_fraction(timing.median_ms, floor))
    return info
