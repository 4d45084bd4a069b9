"""What the parent (a Judge) and its two children say to each other, typed: every message is a
frozen dataclass here, written by the child with `Channel.post` and read back by the parent
with `parse`; the candidate's evidence as the verdict reads it.

Each child writes one JSON object a line on its private channel (sandbox.Channel: `type` plus
the message's fields); the parent writes requests on the child's stdin. For one candidate:

    reference process (reference.py)     parent (evaluate/__init__.py)      candidate process (worker.py)
    Loaded: flops, bytes, hardware  -->                                 <-- Ready (torch, CUDA up; a spare)
                               <-- Draw: seeds, sets budget
    ReferenceReady: dtypes, errors  -->
                               <-- "time" (first draw only)
    Baseline / BaselineFailed ...   -->
    Drawn                           -->   spec.json path on stdin -->
                                                                    <-- StageEntered compile; Compiled | CompileFailed
                                                                    <-- StageEntered verify; Verified: files
                               <-- Compare: files, tolerances
    Compared: ok, errors, summaries -->   Command.BENCH (or STOP) -->
                                                                    <-- StageEntered bench; FirstRound: timing, fingerprints
                               <-- TimeRound (paired rounds)        <-- Round ... (Command.AGAIN each)
    Timed: timing                   -->   Command.END -->
                                                                    <-- StageEntered profile; Profiled: kernels
                                                                    <-- Done | Refused | Crashed | WrongOutputs
                                                                        | HarnessFailed
                               <-- CheckFresh: some timed calls' (set, seed), picked now
    FreshChecked: their summaries   -->
    TaskFailed (any time: the task's own code failed)

The verdict is made in the parent (verdict.decide) from `Evidence.of(outcome)` and the
parent's own `ParentView`; nothing the candidate prints reaches it. A message of a known kind
sent out of turn (a second `verified`, a timed round nobody asked for) is evidence too: decide()
rejects the candidate for it. A message that does not parse (unknown kind, a field missing or
unknown) counts as not sent.
"""

from __future__ import annotations

import dataclasses
import enum
import time
import json
from typing import Any, ClassVar, Literal, get_args

from warpforge.evaluate.paired import Rounds
from warpforge.evaluate.sandbox import ChildOutcome
from warpforge.evaluate.verify import Comparison, RefSummary

CandidateKind = Literal["ready", "stage", "compiled", "compile_error", "verified", "bench", "bench_round", "profile",
                        "done", "rejected", "runtime_error", "wrong_outputs", "harness_error"]
ReferenceKind = Literal["loaded", "baseline", "baseline_error", "reference", "drawn", "compared", "timed", "fresh_checked",
                        "task_error"]
CANDIDATE_KINDS: frozenset[str] = frozenset(get_args(CandidateKind))
REFERENCE_KINDS: frozenset[str] = frozenset(get_args(ReferenceKind))
ENDS = ("done", "rejected", "runtime_error", "wrong_outputs", "harness_error")
"""The messages that end a candidate process's work."""

# bound now: the candidate's process sends these messages, and its Guard watches this module's
# names, not the builtins or dataclasses a candidate could replace
_fields = dataclasses.fields
_getattr = getattr


@dataclasses.dataclass(frozen=True)
class Message:
    """One line on a child's channel: `KIND` is its `type`, the fields its payload."""

    KIND: ClassVar[str] = ""

    def payload(self) -> dict[str, Any]:
        return {f.name: _getattr(self, f.name) for f in _fields(self)}

    def to_json(self) -> str:
        return json.dumps({"type": self.KIND, **self.payload()}, default=str)


# -- the candidate process's messages (worker.py) ---------------------------------------------


@dataclasses.dataclass(frozen=True)
class Ready(Message):
    """Torch and the device are up; this process waits as a spare for a spec."""

    KIND: ClassVar[str] = "ready"


@dataclasses.dataclass(frozen=True)
class StageEntered(Message):
    KIND: ClassVar[str] = "stage"
    name: str


@dataclasses.dataclass(frozen=True)
class Compiled(Message):
    KIND: ClassVar[str] = "compiled"
    seconds: float


@dataclasses.dataclass(frozen=True)
class CompileFailed(Message):
    KIND: ClassVar[str] = "compile_error"
    message: str
    trace: str = ""


@dataclasses.dataclass(frozen=True)
class Verified(Message):
    """The verification outputs are written (out_<i>.pt in the workdir; the parent reads its own
    paths, not these)."""

    KIND: ClassVar[str] = "verified"
    files: list[str]
    types: list[list[str]]


@dataclasses.dataclass(frozen=True)
class FirstRound(Message):
    """The first round of timed calls, with the sets verification never saw."""

    KIND: ClassVar[str] = "bench"
    timing: dict[str, Any]
    fingerprints: Any
    native_threads_added: int = 0


@dataclasses.dataclass(frozen=True)
class Round(Message):
    """Each paired round after the first."""

    KIND: ClassVar[str] = "bench_round"
    timing: dict[str, Any]
    fingerprints: Any


@dataclasses.dataclass(frozen=True)
class Profiled(Message):
    """Which kernels ran (profile.kernels_launched)."""

    KIND: ClassVar[str] = "profile"
    kernels: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Done(Message):
    KIND: ClassVar[str] = "done"


@dataclasses.dataclass(frozen=True)
class Refused(Message):
    """A rule of the harness refused the candidate (worker.Rejected)."""

    KIND: ClassVar[str] = "rejected"
    message: str


@dataclasses.dataclass(frozen=True)
class Crashed(Message):
    """The candidate's code raised (its traceback from the candidate's call inward, no harness
    frame), or the harness found a fault in it (`call` empty, the message says what)."""

    KIND: ClassVar[str] = "runtime_error"
    message: str
    trace: str = ""
    call: str = "forward()"
    """What raised: "ModelNew(*init_inputs)", "forward()", "the candidate's code" (a method of
    its module the harness called), "device" (an error of its device work that surfaced later,
    at a synchronisation or an allocation), or "" (a fault the harness found)."""


@dataclasses.dataclass(frozen=True)
class WrongOutputs(Message):
    """forward() returned outputs that cannot be the reference's: their count, a non-tensor, a
    shape or a dtype (inputs.output_problem); found before the harness touched them."""

    KIND: ClassVar[str] = "wrong_outputs"
    message: str


@dataclasses.dataclass(frozen=True)
class HarnessFailed(Message):
    """The harness's own code raised in the candidate's process, with no candidate call on the
    traceback: a warpforge bug, not the candidate's error."""

    KIND: ClassVar[str] = "harness_error"
    message: str
    trace: str = ""


# -- the reference process's messages (reference.py) ------------------------------------------


@dataclasses.dataclass(frozen=True)
class Loaded(Message):
    KIND: ClassVar[str] = "loaded"
    flops: float | None
    bytes: float | None
    hardware: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Baseline(Message):
    KIND: ClassVar[str] = "baseline"
    name: str
    timing: dict[str, Any]
    cached: bool = False
    """Read from the baseline cache, not measured in this process."""


@dataclasses.dataclass(frozen=True)
class BaselineFailed(Message):
    KIND: ClassVar[str] = "baseline_error"
    name: str
    message: str
    cached: bool = False


@dataclasses.dataclass(frozen=True)
class ReferenceReady(Message):
    """A draw's references are computed and its inputs written for the candidate."""

    KIND: ClassVar[str] = "reference"
    dtypes: list[str]
    native_errors: list[list[list[float]]]
    """[set][output] -> (relative L2, max error / scale) of the task's program against float64."""
    notes: list[str]
    numels: list[int]
    sets: int
    verify_sets: int
    input_bytes: int = 0
    """One input set's bytes (paired timing's memory plan)."""
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    """The reference process's parts of the draw, by name (reference_draw, reference_outputs,
    reference_hand_over), reported inside the result's `reference` stage."""
    spreads: list[float | None] = dataclasses.field(default_factory=list)
    """[output] -> how far its float64 values move across the draw's sets (relative L2, the
    largest change from the first set; None for one set or a non-float output)."""


@dataclasses.dataclass(frozen=True)
class Drawn(Message):
    KIND: ClassVar[str] = "drawn"


@dataclasses.dataclass(frozen=True)
class Compared(Message):
    """The candidate's verification outputs against the held references; when all match, every
    input set's reference summaries ([set][output] of values, norm, scale) for the timed calls."""

    KIND: ClassVar[str] = "compared"
    ok: bool
    reason: str
    max_abs_err: float
    rel_l2_err: float
    summaries: list[list[dict[str, Any]]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Timed(Message):
    """One paired round of the task's own program."""

    KIND: ClassVar[str] = "timed"
    timing: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class FreshChecked(Message):
    """The reference summaries ([call][output] of values, norm, scale) of the timed calls a
    CheckFresh named, their inputs made again from (set, seed)."""

    KIND: ClassVar[str] = "fresh_checked"
    summaries: list[list[dict[str, Any]]]


@dataclasses.dataclass(frozen=True)
class TaskFailed(Message):
    """The task's own code failed (not a verdict on any candidate)."""

    KIND: ClassVar[str] = "task_error"
    message: str
    trace: str = ""


MESSAGES: dict[str, type[Message]] = {cls.KIND: cls for cls in (
    Ready, StageEntered, Compiled, CompileFailed, Verified, FirstRound, Round, Profiled, Done, Refused, Crashed,
    WrongOutputs, HarnessFailed, Loaded, Baseline, BaselineFailed, ReferenceReady, Drawn, Compared, Timed, FreshChecked,
    TaskFailed)}
assert set(MESSAGES) == CANDIDATE_KINDS | REFERENCE_KINDS


def parse(raw: dict[str, Any]) -> Message | None:
    """The typed message of one line as the channel delivered it, or None when it is none of
    ours: an unknown `type`, a field missing, a field no message of that kind has. The parent's
    own stamps (keys starting with "_") are not fields."""
    cls = MESSAGES.get(raw.get("type"))  # type: ignore[arg-type]
    if cls is None:
        return None
    names = {f.name for f in _fields(cls)}
    payload = {k: v for k, v in raw.items() if k != "type" and not k.startswith("_")}
    if not set(payload) <= names:
        return None
    try:
        return cls(**payload)
    except TypeError:  # a required field missing
        return None


def first(messages: list[dict[str, Any]], cls: type[Any]) -> Any:
    """The first message of `cls`'s kind among raw channel messages that parses, else None."""
    for raw in messages:
        if raw.get("type") == cls.KIND:
            message = parse(raw)
            if isinstance(message, cls):
                return message
    return None


def every(messages: list[dict[str, Any]], cls: type[Any]) -> list[Any]:
    """Every message of `cls`'s kind among raw channel messages that parses."""
    return [m for raw in messages if raw.get("type") == cls.KIND and isinstance(m := parse(raw), cls)]


# -- requests from the parent to the reference process (one JSON line on its stdin) -----------


@dataclasses.dataclass(frozen=True)
class ReferenceSpec:
    """What the reference process is started with (reference_spec.json)."""

    task_path: str
    sizes: dict[str, Any]
    device: str
    init_seed: int
    allow_tf32: bool
    compile_baseline: bool | None
    """Time torch.compile too (None: the config's default, off)."""
    timing: dict[str, Any]
    """The parent's EvalConfig.timing (config.TimingBudget.to_dict): what the baselines are timed with."""
    task_hash: str
    baseline_cache_dir: str = ""
    fit_bytes: int = 0
    """0: the task's globals as they are (with `sizes`); N: a task with no preset for this size
    has its large int globals scaled down until inputs and weights take at most N bytes
    (presets.fit_globals)."""
    strict_fp32: bool = False
    """TF32 off in this process before the task loads (precision.apply)."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ReferenceSpec:
        return cls(**json.loads(text))


@dataclasses.dataclass(frozen=True)
class Draw:
    """Fresh inputs for the next candidate: the verification sets, then the sets only timed
    calls see."""

    op: ClassVar[str] = "draw"
    inputs_path: str
    trial_seeds: list[int]
    verify_sets: int
    sets_budget_bytes: int | None
    time_baselines: bool
    share_inputs: bool = False
    """CUDA: the input sets go to the candidate as IPC handles of copies (evaluate/shared.py), not
    in the file, when they fit the GPU."""


@dataclasses.dataclass(frozen=True)
class Compare:
    """Compare the candidate's verification outputs (its files) with the held references."""

    op: ClassVar[str] = "compare"
    files: list[str]
    positions: list[list[int]]
    tolerances: list[dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class TimeRound:
    """Time the task's program for one paired round on the current draw's sets."""

    op: ClassVar[str] = "time"
    seed: int
    timing: dict[str, Any]
    """The parent's EvalConfig.timing, as the candidate's process has it (config.TimingBudget)."""
    first: bool
    """The candidate's first run is timed with `timing` itself; later rounds with its warm_round()."""
    positions: list[list[int]]


@dataclasses.dataclass(frozen=True)
class CheckFresh:
    """Make the inputs of these timed calls again ([set, seed] each: inputs.fresh_variant) and
    send their reference outputs' summaries at `positions`."""

    op: ClassVar[str] = "fresh"
    calls: list[list[int]]
    positions: list[list[int]]


REQUESTS: dict[str, type[Any]] = {cls.op: cls for cls in (Draw, Compare, TimeRound, CheckFresh)}


def request_json(request: Draw | Compare | TimeRound | CheckFresh) -> str:
    return json.dumps({"op": request.op, **dataclasses.asdict(request)})


def request_from_json(line: str) -> Draw | Compare | TimeRound | CheckFresh:
    raw = json.loads(line)
    cls = REQUESTS[raw.pop("op")]
    return cls(**raw)  # type: ignore[no-any-return]


class Command(str, enum.Enum):
    """What the parent writes on the candidate process's stdin between its stages, one word a
    line: after `Verified`, BENCH (time it) or STOP; after each timed round, AGAIN (one more
    paired round) or END. Anything else the candidate reads is taken as STOP or END."""

    BENCH = "bench"
    STOP = "stop"
    AGAIN = "again"
    END = "end"


def read_command(line: str) -> Command | None:
    """The command on one line of the candidate's stdin; None for anything else (its parent died)."""
    try:
        return Command(line.strip())
    except ValueError:
        return None


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
    """The draw's file: init inputs, every input set, the reference's weights and its outputs' shapes and dtypes."""
    workdir: str = ""
    """Where the verified outputs go (out_<i>.pt)."""
    init_seed: int = 0
    positions: list[list[int]] = dataclasses.field(default_factory=list)
    """Each output's secret fingerprint positions."""
    bench_seed: int = 0
    verify_sets: int = 0
    """The first sets are checked (verification); the rest only timed calls see."""
    poison_bytes: int = 0
    timing: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The parent's EvalConfig.timing (config.TimingBudget.to_dict), the same the reference's process
    gets: the first run is timed with it, each paired round after it with its warm_round()."""
    profile: bool = False
    kernel_names: list[str] = dataclasses.field(default_factory=list)
    """The candidate's own kernel names, to tell its kernels from the library's in the profile."""
    share_outputs: bool = False
    """CUDA: the verified outputs go to the reference process as IPC handles of copies
    (evaluate/shared.py); the out_<i>.pt files then hold only their descriptors."""
    strict_fp32: bool = False
    """TF32 off in this process before the candidate is imported (precision.apply)."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CandidateSpec:
        return cls(**json.loads(text))


@dataclasses.dataclass(frozen=True)
class Failure:
    """A `compile_error`, `runtime_error` or `harness_error`: the exception's one-line message, its
    traceback, and (a runtime error) what raised (Crashed.call)."""

    message: str
    trace: str = ""
    call: str = "forward()"


@dataclasses.dataclass(frozen=True)
class BenchReport:
    """One round of timed calls (`bench`, then each paired `bench_round`)."""

    timing: dict[str, Any]
    fingerprints: Any
    """[input set, [each output's fingerprint]] for every timed call on a set itself, [input set,
    [...], seed] for one on fresh content (inputs.fresh_variant), as sent (verdict.py checks its
    shape: it comes from the candidate's process)."""
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
    wrong_outputs: str | None = None
    """Why forward()'s outputs cannot be the reference's (WrongOutputs)."""
    harness_error: Failure | None = None
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
        first: dict[str, Message] = {}
        rounds: list[BenchReport] = []
        verified = 0
        for raw in outcome.messages:
            kind, message = raw.get("type"), parse(raw)
            if kind in ("bench", "bench_round"):  # a malformed round is kept, as one decide() refuses
                rounds.append(_bench_report(message))
            if message is None:
                continue
            if isinstance(message, StageEntered) and isinstance(message.name, str):
                stages.append((message.name, raw.get("_received")))
            if message.KIND in ENDS and "_received" in raw:
                ends.append(raw["_received"])
            verified += isinstance(message, Verified)
            first.setdefault(message.KIND, message)
        compile_error, refused, crashed = first.get("compile_error"), first.get("rejected"), first.get("runtime_error")
        bench, profile = first.get("bench"), first.get("profile")
        wrong = first.get("wrong_outputs")
        return cls(
            stages=tuple(stages), end_times=tuple(ends), compile_error=_failure(compile_error),
            rejected=str(refused.message) if isinstance(refused, Refused) else None,
            runtime_error=_failure(crashed), wrong_outputs=str(wrong.message) if isinstance(wrong, WrongOutputs) else None,
            harness_error=_failure(first.get("harness_error")), done="done" in first, verified=verified,
            bench=_bench_report(bench) if bench is not None else None, rounds=tuple(rounds),
            profile=profile.kernels if isinstance(profile, Profiled) and isinstance(profile.kernels, dict) else None)


def _failure(message: Message | None) -> Failure | None:
    if not isinstance(message, (CompileFailed, Crashed, HarnessFailed)):
        return None
    return Failure(str(message.message), str(message.trace), str(message.call) if isinstance(message, Crashed) else "")


def _bench_report(message: Message | None) -> BenchReport:
    """A timed round as decide() checks it; an empty one when the message did not parse."""
    if not isinstance(message, (FirstRound, Round)):
        return BenchReport({}, [], 0)
    threads = message.native_threads_added if isinstance(message, FirstRound) else 0
    return BenchReport(message.timing if isinstance(message.timing, dict) else {}, message.fingerprints,
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
    summaries: dict[tuple[int, ...], RefSummary] = dataclasses.field(default_factory=dict)
    """Reference summaries for timed calls: every input set's outputs, keyed (set, output), and
    those of the fresh calls picked for checking, keyed (set, output, seed)."""
    requested_rounds: int = 0
    """Rounds of timed calls the parent asked for ("bench", then each "again"; 0 until it asks)."""
    answered_rounds: int = 0
    """... and the round reports it took as their answers."""
    unrequested: int = 0
    """`bench` / `bench_round` messages that came when none was asked for."""
    parent_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    """Seconds the parent spent on its side of the candidate's stages: "compare" (the reference
    process reading and comparing the verified outputs, inside the verify stage) and
    "reference_rounds" (paired timing's rounds of the task's program, inside the bench stage) and
    "fresh_checks" (the reference process checking fresh timed calls, after the candidate's process)."""

    def add_seconds(self, name: str, since: float) -> None:
        self.parent_seconds[name] = self.parent_seconds.get(name, 0.0) + time.monotonic() - since

    def out_of_turn(self, evidence: Evidence) -> bool:
        """True when the candidate's process reported timed rounds nobody asked for, or more
        than were asked for: only code speaking the private channel itself sends those (its
        descriptor can be found), and their timings must never reach the speedup."""
        return bool(self.unrequested) or len(evidence.rounds) > self.requested_rounds
