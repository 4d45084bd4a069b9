"""The verdict: decided here, in the parent, from the evidence the children sent.

Nothing the candidate prints or does to its own process reaches this module except through
the messages its process sent on the private channel and the output files it wrote; both are
judged against the reference outputs, which the candidate never saw.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from typing import Any, cast

import torch

from warpforge import metrics
from warpforge.candidate import EvalResult, Stage, Status, Timing
from warpforge.config import EvalConfig
from warpforge.evaluate import compile as compile_mod
from warpforge.evaluate.paired import Rounds, unstable as paired_unstable
from warpforge.evaluate.protocol import Compared, Evidence, Failure, FreshChecked, Loaded, ParentView
from warpforge.evaluate.sandbox import ChildOutcome
from warpforge.evaluate.verify import Comparison, RefSummary, Tolerance, compare_fingerprint, thin_margin_note

SPEED_OF_LIGHT_SLACK = 1.5  # a result this many times faster than the datasheet roofline is impossible
# repeat calls (values seen before, new addresses) this many times faster than first-seen values
# at their best: a content cache. Honest kernels do not care which values they were given before.
CONTENT_CACHE_RATIO = 3.0
CONTENT_CACHE_REASON = "results are cached by input content"
# Counted timed calls run on fresh content (bench.time_calls), whose references are computed only
# for the calls the parent picks after the candidate's process has ended: this many a round, at
# random. A program that is wrong on fresh content in a share p of the calls escapes with
# (1 - p) ** (3 * rounds): to move a round's median it must be wrong in most of them, which five
# rounds catch but for 0.5 ** 15 = 3e-5. Each check costs a float64 forward in the reference process.
FRESH_CHECKS_PER_ROUND = 3


@dataclasses.dataclass
class Reference:
    """One draw of the reference process (which keeps the float64 outputs): what the parent
    needs to know about them."""
    numels: list[int]
    """Elements of each output."""
    sets: int
    """Input sets drawn: the verification trials, then those only timed calls see."""
    dtypes: list[torch.dtype]
    tolerances: list[Tolerance]
    loaded: Loaded
    """The reference process's start-up message: flops, bytes, hardware."""
    baselines: dict[str, Timing]
    baseline_notes: list[str]
    seconds: float
    verify_sets: int
    paired: bool = True
    """False when paired timing does not fit the GPU for these sets (paired.pair_memory_note)."""
    parts: dict[str, float] = dataclasses.field(default_factory=dict)
    """The reference process's parts of `seconds` (ReferenceReady.seconds)."""


def with_verdict(result: EvalResult, status: Status, reason: str, stage: str, **changes: Any) -> EvalResult:
    """A copy of `result` with a verdict; every verdict is made this way."""
    return dataclasses.replace(result, status=status, reason=reason, stage=cast(Stage, stage), **changes)


def fresh_calls_to_check(outcome: ChildOutcome, sets: int, rng: random.Random) -> list[list[int]]:
    """[set, seed] of FRESH_CHECKS_PER_ROUND timed calls on fresh content per round, picked at
    random from those the candidate's process reported (well-formed ones on a drawn set)."""
    picked: list[list[int]] = []
    for report in Evidence.of(outcome).rounds:
        calls = [[e[0], e[2]] for e in report.fingerprints if isinstance(e, (list, tuple)) and len(e) == 3
                 and _is_int(e[0]) and 0 <= e[0] < sets and _is_int(e[2]) and 0 <= e[2] < 2**63] \
            if isinstance(report.fingerprints, list) else []
        picked += rng.sample(calls, min(FRESH_CHECKS_PER_ROUND, len(calls)))
    return picked


def _is_int(value: Any) -> bool:
    return type(value) is int


def fresh_summaries(calls: list[list[int]], reply: FreshChecked) -> dict[tuple[int, ...], RefSummary]:
    """The reference summaries of the fresh calls checked, keyed (set, output, seed)."""
    return {(index, j, seed): RefSummary(torch.tensor(s["values"], dtype=torch.float64), float(s["norm"]),
                                         float(s["scale"]))
            for (index, seed), row in zip(calls, reply.summaries) for j, s in enumerate(row)}


def comparison_from(reply: Compared) -> tuple[Comparison, dict[tuple[int, ...], RefSummary]]:
    """The reference process's `Compared` message as a Comparison and, keyed by (input set,
    output), the reference summaries that timed calls are checked against."""
    comparison = Comparison(bool(reply.ok), str(reply.reason), float(reply.max_abs_err), float(reply.rel_l2_err))
    summaries: dict[tuple[int, ...], RefSummary] = {
        (i, j): RefSummary(torch.tensor(s["values"], dtype=torch.float64), float(s["norm"]), float(s["scale"]))
        for i, row in enumerate(reply.summaries) for j, s in enumerate(row)}
    return comparison, summaries


def _stage_seconds(evidence: Evidence, outcome: ChildOutcome, sent: float | None,
                   parent_seconds: dict[str, float]) -> dict[str, float]:
    """Seconds from each stage's start to the next message that starts another stage or ends;
    "waiting": from handing the candidate over (`sent`) until its process started on it (the
    rest of its start-up, when it was not yet idle); and the parent's own parts of them
    (ParentView.parent_seconds: "compare" within verify, "reference_rounds" within bench)."""
    marks = [(name, at) for name, at in evidence.stages if at is not None]
    ends = evidence.end_times
    result: dict[str, float] = {}
    if sent is not None and marks:
        result["waiting"] = round(max(marks[0][1] - sent, 0.0), 3)
    for i, (name, start) in enumerate(marks):
        end = marks[i + 1][1] if i + 1 < len(marks) else (ends[-1] if ends else start)
        result[name] = round(end - start, 3)
    result["candidate_process"] = round(outcome.seconds, 3)
    return result | {name: round(seconds, 3) for name, seconds in parent_seconds.items()}


def decide(outcome: ChildOutcome, view: ParentView, reference: Reference, cfg: EvalConfig,
           base: EvalResult) -> EvalResult:
    """The verdict on one candidate, from its process's evidence and what the parent saw."""
    evidence = Evidence.of(outcome)
    stage = evidence.stage
    tail = outcome.output[-4000:]
    common = dataclasses.replace(
        base, output_tail=tail, trials=reference.verify_sets, warnings=tuple(reference.baseline_notes),
        reference=reference.baselines.get("eager"), compiled_reference=reference.baselines.get("torch_compile"),
        stage_seconds={"reference": round(reference.seconds, 3), **reference.parts,
                       **_stage_seconds(evidence, outcome, view.sent, view.parent_seconds)})
    comparison = view.comparison
    if comparison is not None:
        common = dataclasses.replace(common, max_abs_err=comparison.max_abs_err, rel_l2_err=comparison.rel_l2_err)
    if outcome.bad_messages or evidence.verified > 1 or view.out_of_turn(evidence):
        return with_verdict(common, "rejected", "the candidate wrote to the harness's private channel", stage)
    if evidence.compile_error is not None:
        summary = compile_mod.summarize_errors(evidence.compile_error.trace + "\n" + outcome.output)
        return with_verdict(common, "compile_error", "the candidate failed to import or compile: "
                            f"{evidence.compile_error.message[:300]}", "compile", compile_log=summary)
    if evidence.rejected is not None:
        return with_verdict(common, "rejected", f"rejected: {evidence.rejected}", stage)
    if outcome.timed_out:
        return with_verdict(common, "timeout", f"killed after {cfg.limits.timeout_s:g} s during the {stage} stage", stage)
    if outcome.out_of_memory:
        return with_verdict(common, "crashed", f"killed during the {stage} stage for using more than {cfg.limits.mem_limit_gb:g} GB of "
                          "host memory", stage)
    if outcome.over_limit:
        return with_verdict(common, "crashed", f"killed during the {stage} stage: {outcome.over_limit}", stage)
    if evidence.wrong_outputs is not None:  # found before the harness touched the outputs
        return with_verdict(common, "incorrect", evidence.wrong_outputs[:500], stage)
    if comparison is not None and not comparison.ok:
        return with_verdict(common, "incorrect", comparison.reason, "verify")
    if evidence.runtime_error is not None:
        return with_verdict(common, "runtime_error", _raised(evidence.runtime_error, stage), stage,
                            compile_log=compile_mod.summarize_errors(evidence.runtime_error.trace))
    if evidence.harness_error is not None:  # not the candidate's error: no traceback is shown as its
        return with_verdict(common, "crashed", f"the harness itself failed during the {stage} stage (a warpforge error, "
                            f"not the candidate's; please report it): {evidence.harness_error.message[:500]}", stage)
    if not evidence.done or comparison is None:
        how = f"was killed by {outcome.signal_name}" if outcome.signal_name else f"exited with code {outcome.returncode}"
        return with_verdict(common, "crashed", f"the candidate process {how} during the {stage} stage, before the harness "
                          "finished (anything it printed is ignored)", stage)
    if (thin := thin_margin_note(comparison.rel_l2_err, reference.tolerances)) is not None:
        common = dataclasses.replace(common, warnings=(*common.warnings, thin))
    if not cfg.bench:
        return with_verdict(common, "correct", comparison.reason + " (not timed)", "verify")
    return _decide_bench(evidence, reference, cfg, common, comparison, view.summaries, view.rounds)


def _raised(failure: Failure, stage: str) -> str:
    """The reason for a runtime error, naming what raised it (protocol.Crashed.call)."""
    message = failure.message[:500]
    if failure.call == "device":
        return (f"the candidate's device work failed during the {stage} stage (its kernels or its memory use, "
                f"reported by a later synchronisation or allocation): {message}")
    if not failure.call:
        return f"the candidate failed during the {stage} stage: {message}"
    return f"{failure.call} raised during the {stage} stage: {message}"


def _timed_calls_problem(prints_of: Any, reference: Reference,
                         summaries: dict[tuple[int, ...], RefSummary]) -> str | None:
    """Why one round's timed outputs are not the reference's (their fingerprints), or None. A call
    on a set itself is checked against that set's references; one on fresh content (an entry
    with its seed) only when it was picked for checking (`fresh_calls_to_check`)."""
    if not isinstance(prints_of, list):
        return "a timed round's report is malformed"
    for entry in prints_of:
        if not (isinstance(entry, (list, tuple)) and len(entry) in (2, 3) and isinstance(entry[0], int)
                and (len(entry) == 2 or isinstance(entry[2], int))):
            return "a timed round's report is malformed"
        index, prints = entry[0], entry[1]
        if not isinstance(prints, list) or len(prints) != len(reference.dtypes):
            return "a timed call returned a different number of outputs"
        if (int(index), 0) not in summaries:
            return f"a timed call reported input set {index}, which was never drawn"
        for j, fp in enumerate(prints):
            summary = summaries.get((int(index), j, int(entry[2])) if len(entry) == 3 else (int(index), j))
            if summary is None:
                continue  # a call on fresh content that was not picked for checking
            dtype = reference.dtypes[j]
            problem = compare_fingerprint(fp, summary, reference.tolerances[j],
                                          torch.finfo(dtype).max if dtype.is_floating_point else math.inf)
            if problem:
                return f"{problem} (input set {int(index) + 1}); correct answers only outside timing are not accepted"
    return None


def _decide_bench(evidence: Evidence, reference: Reference, cfg: EvalConfig, common: EvalResult,
                  comparison: Comparison, summaries: dict[tuple[int, ...], RefSummary],
                  paired: Rounds | None) -> EvalResult:
    bench = evidence.bench
    if bench is None:
        return with_verdict(common, "crashed", "the candidate process finished without timing results", "bench")
    for report in evidence.rounds:  # every round's timed calls, the first (with the unseen sets) and the paired ones
        problem = _timed_calls_problem(report.fingerprints, reference, summaries)
        if problem:
            return with_verdict(common, "incorrect", problem, "bench")
    timing = Timing.from_dict(bench.timing)
    if paired is not None and paired.reference:
        common = _with_pairs(common, paired, [r.timing for r in evidence.rounds], cfg)
        timing = common.candidate or timing
    cached = content_cache_suspected(bench.timing)
    if cached:
        return with_verdict(common, "rejected", f"rejected: {cached}", "bench", candidate=timing)
    warnings = list(common.warnings)
    if bench.native_threads_added:
        warnings.append(f"{bench.native_threads_added} native threads appeared during the timed calls")
    roofline = _roofline(reference, timing, cfg)
    kernels = evidence.profile or {}
    result = with_verdict(common, "correct", comparison.reason, "done", candidate=timing, roofline=roofline,
                   kernels=kernels, warnings=tuple(warnings))
    limit = roofline.get("impossible_below_ms", roofline.get("floor_ms"))
    fraction = metrics.roofline_fraction(timing.median_ms, limit) if isinstance(limit, float) else None
    if isinstance(fraction, float) and fraction > SPEED_OF_LIGHT_SLACK:
        return dataclasses.replace(result, status="rejected", stage="bench", reason=(
            f"measured {timing.median_ms:.4g} ms, {fraction:.1f}x faster than this GPU's speed of light "
            f"({limit:.4g} ms): results were cached or work was hidden from the timer"))
    return result


def _with_pairs(common: EvalResult, paired: Rounds, candidate_rounds: list[dict[str, Any]],
                cfg: EvalConfig) -> EvalResult:
    """The result with its paired timing: pooled reference and candidate samples, the speedup as
    the median of the rounds' ratios with its interval, and `unstable` when too wide to decide
    (paired.unstable). The speedup and its interval are kept either way: claim.py decides."""
    n = min(len(paired.reference), len(candidate_rounds))
    ref_ms = paired.reference_medians()[:n]
    cand_ms = [float(t["median_ms"]) for t in candidate_rounds[:n]]
    try:
        speedup, (low, high) = metrics.paired_speedup(ref_ms, cand_ms)
    except ValueError:  # no round with two positive times (a malformed report): the unpaired timing stands
        return common
    spread = cfg.timing.process_spread or 0.0  # resolved by the Judge: never None here
    unstable = paired_unstable(low, high, cfg.timing.timing_bound, spread)
    record = {"rounds": n, "reference_ms": ref_ms, "candidate_ms": cand_ms, "reference_first": paired.reference_first[:n],
              "speedup": speedup, "rounds_interval": [low, high], "process_spread": spread,
              "interval": [low / (1 + spread), high * (1 + spread)], "bound": cfg.timing.timing_bound, "unstable": unstable,
              "reference_tail_ms": [t.get("tail_median_ms") for t in paired.reference[:n]],
              "candidate_tail_ms": [t.get("tail_median_ms") for t in candidate_rounds[:n]]}
    warnings = list(common.warnings)
    if unstable:
        warnings.append(f"timing_unstable: the paired speedup's interval {low:.3g}-{high:.3g}x straddles 1 and stayed "
                        f"wider than {cfg.timing.timing_bound:.0%} after {n} rounds: within noise, neither faster nor slower")
    return dataclasses.replace(common, reference=_pooled(paired.reference[:n]), candidate=_pooled(candidate_rounds[:n]),
                               paired=record, warnings=tuple(warnings))


def _pooled(timings: list[dict[str, Any]]) -> Timing:
    """One Timing from several rounds' samples (the host latency: the median of their medians)."""
    samples = [float(x) for t in timings for x in t.get("samples_ms", ())] or [float(t["median_ms"]) for t in timings]
    q = statistics.quantiles(samples, n=4) if len(samples) >= 2 else [samples[0]] * 3
    return Timing(median_ms=statistics.median(samples), iqr_ms=q[2] - q[0], min_ms=min(samples),
                  mean_ms=statistics.fmean(samples), n=len(samples),
                  host_median_ms=statistics.median(float(t["host_median_ms"]) for t in timings),
                  tail_median_ms=_median_of(t.get("tail_median_ms") for t in timings), samples_ms=tuple(samples))


def _median_of(values: Any) -> float | None:
    known = [float(v) for v in values if v is not None]
    return statistics.median(known) if known else None


def content_cache_suspected(timing: dict[str, Any]) -> str | None:
    """Why a bench summary looks like a content cache (repeat values much faster), or None."""
    fresh, repeat = timing.get("first_seen_min_ms"), timing.get("repeat_median_ms")
    if isinstance(fresh, (int, float)) and isinstance(repeat, (int, float)) and repeat * CONTENT_CACHE_RATIO < fresh:
        return (f"calls on input values seen before ran in {repeat:.4g} ms, more than {CONTENT_CACHE_RATIO:g}x faster "
                f"than on values seen for the first time ({fresh:.4g} ms at best): {CONTENT_CACHE_REASON}")
    return None


def content_cache_rejected(result: EvalResult) -> bool:
    """Whether `result` is the content-cache probe's rejection (decide() above)."""
    return result.status == "rejected" and result.stage == "bench" and CONTENT_CACHE_REASON in result.reason


def confirm_content_cache(first: EvalResult, second: EvalResult) -> EvalResult:
    """The verdict after the content-cache probe fired on `first` and the candidate was evaluated
    again on a fresh, independent draw (`second`).

    When memory allows only one unseen timing set, one first-seen call decides the probe, and one
    call slowed by a busy machine (measured under CI load: 0.33 ms against 0.056 ms) looks like a
    cache miss. A content cache misses on every fresh draw, so it is rejected again; a slow call
    does not repeat on cue. Only a second rejection by the probe rejects; otherwise the second
    evaluation's verdict stands, with a warning naming the first."""
    if content_cache_rejected(second):
        return dataclasses.replace(second, reason=f"{second.reason} (on two independent draws; the first: "
                                                  f"{first.reason.removeprefix('rejected: ')})")
    note = (f"the content-cache probe fired on a first draw ({first.reason.removeprefix('rejected: ')}) "
            f"and not on a second, independent one; this result is the second's")
    return dataclasses.replace(second, warnings=(*second.warnings, note))


def _roofline(reference: Reference, timing: Timing, cfg: EvalConfig) -> dict[str, Any]:
    flops, nbytes = reference.loaded.flops, reference.loaded.bytes
    info: dict[str, Any] = {"flops": flops, "bytes": nbytes}
    peaks = metrics.peaks_for(str(reference.loaded.hardware.get("gpu", ""))) if cfg.device == "cuda" else None
    if peaks is None:
        return info
    dtype = str(reference.dtypes[0]).removeprefix("torch.") if reference.dtypes else "float32"
    try:
        peak_flops = metrics.peak_flops_for_dtype(peaks, dtype, allow_tf32=cfg.safety.allow_tf32)
    except ValueError:
        peak_flops = None
    floor = metrics.roofline_ms(flops, nbytes, peak_flops, peaks.get("bytes_per_s"))
    if floor is not None and timing.median_ms > 0 and not math.isnan(timing.median_ms):
        info.update(floor_ms=floor, fraction=metrics.roofline_fraction(timing.median_ms, floor))
        if dtype == "float32":
            # what no program can beat: PyTorch's own defaults run fp32 convolutions on TF32
            # tensor cores (cuDNN), so the limit for the impossible-speed check is the TF32 rate
            # (an fp32 conv2d A/A pair measured 1.52x under the fp32-core floor on an H100)
            fastest = metrics.roofline_ms(flops, nbytes, metrics.peak_flops_for_dtype(peaks, dtype, allow_tf32=True),
                                          peaks.get("bytes_per_s"))
            info["impossible_below_ms"] = fastest
    return info
