"""What the parent (a Judge) and its two children say to each other, and the candidate's
evidence typed as the verdict reads it.

Each child writes one JSON object a line on its private channel (sandbox.Channel: `type` plus
fields); the parent writes requests on the child's stdin. For one candidate:

    reference process (reference.py)     parent (evaluate/__init__.py)      candidate process (worker.py)
    loaded: flops, bytes, hardware  -->                                 <-- ready (torch, CUDA up; a spare)
    baseline / baseline_error ...   -->   (first draw only)
                               <-- {"op": "draw", seeds, sets budget}
    reference: dtypes, errors, notes -->
    drawn                           -->   spec.json path on stdin -->
                                                                    <-- stage compile; compiled | compile_error
                                                                    <-- stage verify; verified: files
                               <-- {"op": "compare", files}
    compared: ok, errors, summaries -->   "bench" (or "stop") -->
                                                                    <-- stage bench; bench: timing, fingerprints
                               <-- {"op": "time"} (paired rounds)   <-- bench_round ... ("again" each)
    timed: timing                   -->   "end" -->
                                                                    <-- stage profile; profile: kernels
                                                                    <-- done | rejected | runtime_error
    task_error (any time: the task's own code failed)

The verdict is made in the parent (verdict.decide) from `Evidence.of(outcome)` and the
parent's own `ParentView`; nothing the candidate prints reaches it. A message of a known kind
sent out of turn (a second `verified`, a timed round nobody asked for) is evidence too: decide()
rejects the candidate for it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal, get_args

from warpforge.evaluate.paired import Rounds
from warpforge.evaluate.sandbox import ChildOutcome
from warpforge.evaluate.verify import Comparison, RefSummary

CandidateKind = Literal["ready", "stage", "compiled", "compile_error", "verified", "bench", "bench_round", "profile",
                        "done", "rejected", "runtime_error"]
ReferenceKind = Literal["loaded", "baseline", "baseline_error", "reference", "drawn", "compared", "timed", "task_error"]
CANDIDATE_KINDS: frozenset[str] = frozenset(get_args(CandidateKind))
REFERENCE_KINDS: frozenset[str] = frozenset(get_args(ReferenceKind))
ENDS = ("done", "rejected", "runtime_error")
"""The messages that end a candidate process's work."""


@dataclasses.dataclass(frozen=True)
class CandidateSpec:
    """What the parent tells a candidate process about its one candidate (spec.json, deleted by
    the process before any candidate code runs: the positions and seeds stay secret)."""

    candidate_path: str
    device: str
    env: dict[str, str]
    """This candidate's compile-cache variables (the process started before it was known)."""
    compile_only: bool = False
    """A compile-pool job: import the candidate (filling the compile cache) and stop."""
    inputs_path: str = ""
    """The draw's file: init inputs, every input set, the reference's weights."""
    workdir: str = ""
    """Where the verified outputs go (out_<i>.pt)."""
    init_seed: int = 0
    positions: list[list[int]] = dataclasses.field(default_factory=list)
    """Each output's secret fingerprint positions."""
    bench_seed: int = 0
    verify_sets: int = 0
    """The first sets are checked (verification); the rest only timed calls see."""
    poison_bytes: int = 0
    bench_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    """bench.time_calls's budgets for the first round."""
    round_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    """... and for each paired round after it."""
    profile: bool = False
    kernel_names: list[str] = dataclasses.field(default_factory=list)
    """The candidate's own kernel names, to tell its kernels from the library's in the profile."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CandidateSpec:
        return cls(**json.loads(text))


@dataclasses.dataclass(frozen=True)
class Failure:
    """A `compile_error` or `runtime_error`: the exception's one-line message and its traceback."""

    message: str
    trace: str = ""


@dataclasses.dataclass(frozen=True)
class BenchReport:
    """One round of timed calls (`bench`, then each paired `bench_round`)."""

    timing: dict[str, Any]
    fingerprints: Any
    """[input set, [each output's fingerprint]] for every timed call, as sent (verdict.py checks
    its shape: it comes from the candidate's process)."""
    native_threads_added: int = 0


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What the candidate's process reported, in the order it came, typed. Where a kind came
    more than once the first counts; every timed round is kept, and the `verified` count, so
    decide() can reject a round nobody asked for or a second `verified`."""

    stages: tuple[tuple[str, float | None], ...] = ()
    """Each stage the process entered, with the parent's receive time."""
    end_times: tuple[float, ...] = ()
    """Receive times of done / rejected / runtime_error."""
    compile_error: Failure | None = None
    rejected: str | None = None
    runtime_error: Failure | None = None
    done: bool = False
    verified: int = 0
    bench: BenchReport | None = None
    """The first round (with the sets verification never saw)."""
    rounds: tuple[BenchReport, ...] = ()
    """Every round, the first included."""
    profile: dict[str, Any] | None = None
    """Which kernels ran (profile.kernels_launched), without the channel's stamps."""

    @property
    def stage(self) -> str:
        """The last stage entered ("compile" before any)."""
        return self.stages[-1][0] if self.stages else "compile"

    @classmethod
    def of(cls, outcome: ChildOutcome) -> Evidence:
        stages: list[tuple[str, float | None]] = []
        ends: list[float] = []
        first: dict[str, dict[str, Any]] = {}
        rounds: list[BenchReport] = []
        verified = 0
        for m in outcome.messages:
            kind = m.get("type")
            if kind == "stage" and isinstance(m.get("name"), str):
                stages.append((m["name"], m.get("_received")))
            if kind in ENDS and "_received" in m:
                ends.append(m["_received"])
            if kind in ("bench", "bench_round"):
                rounds.append(_bench_report(m))
            verified += kind == "verified"
            if isinstance(kind, str):
                first.setdefault(kind, m)
        profile = first.get("profile")
        return cls(
            stages=tuple(stages), end_times=tuple(ends), compile_error=_failure(first.get("compile_error")),
            rejected=str(first["rejected"].get("message", "")) if "rejected" in first else None,
            runtime_error=_failure(first.get("runtime_error")), done="done" in first, verified=verified,
            bench=_bench_report(first["bench"]) if "bench" in first else None, rounds=tuple(rounds),
            profile={k: v for k, v in profile.items() if k not in ("type", "_received")} if profile else None)


def _failure(message: dict[str, Any] | None) -> Failure | None:
    if message is None:
        return None
    return Failure(str(message.get("message", "")), str(message.get("trace", "")))


def _bench_report(message: dict[str, Any]) -> BenchReport:
    timing, threads = message.get("timing"), message.get("native_threads_added", 0)
    return BenchReport(timing if isinstance(timing, dict) else {}, message.get("fingerprints", []),
                       threads if isinstance(threads, int) else 0)


@dataclasses.dataclass
class ParentView:
    """What the parent itself saw and did while the candidate ran: filled as its messages
    arrive (Judge._run_candidate's on_message), read by decide()."""

    rounds: Rounds | None = None
    """Paired timing's rounds (None: timed once, or not timed)."""
    sent: float | None = None
    """When the spec was handed to the candidate's process (monotonic seconds)."""
    comparison: Comparison | None = None
    """The reference process's comparison of the verified outputs; None until it ran."""
    summaries: dict[tuple[int, int], RefSummary] = dataclasses.field(default_factory=dict)
    """Reference summaries of every input set's outputs, keyed (set, output), for timed calls."""
    requested_rounds: int = 0
    """Rounds of timed calls the parent asked for ("bench", then each "again"; 0 until it asks)."""
    answered_rounds: int = 0
    """... and the round reports it took as their answers."""
    unrequested: int = 0
    """`bench` / `bench_round` messages that came when none was asked for."""

    def out_of_turn(self, evidence: Evidence) -> bool:
        """True when the candidate's process reported timed rounds nobody asked for, or more
        than were asked for: only code speaking the private channel itself sends those (its
        descriptor can be found), and their timings must never reach the speedup."""
        return bool(self.unrequested) or len(evidence.rounds) > self.requested_rounds
