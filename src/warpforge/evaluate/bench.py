"""The one timing function. Every speed number warpforge reports comes from `time_calls`.

Method (after triton.testing.do_bench, hardened for adversarial code):
- warm-up and repetitions are time budgets (25 ms / 100 ms by default), clamped to a count;
- before every call the inputs are fresh clones (new addresses) of one of several verified
  input sets, made outside the timed window; earlier clones stay alive a while so an
  address cannot be recycled to hit a cache keyed on pointers;
- given `fresh`, the statistics come only from calls on inputs no call has seen (`fresh(i)`, a
  new variant of set i made outside the window for each call), so a cache keyed on content never
  hits on a counted call; calls on the verified sets themselves are interleaved (checked, and the
  content-cache probe's) but not counted;
- L2 is flushed by *reading* a buffer twice the L2 size (a write-flush leaves dirty lines
  that slow the next kernel by 20-30 %);
- CUDA: one event pair per call on the caller's stream; the end event is recorded only after
  a device-wide synchronize, so work hidden on other streams or threads is counted. A mark on
  the caller's stream before the sync splits the window: a call reads the stream's time plus
  whatever the sync took beyond this process's own round trip with nothing pending (measured
  per timing run, `sync_floor`, at most 30 us), so the reference's and the candidate's
  processes each take off their own host's sync cost and hidden work still counts. Before the
  start event the GPU is kept busy by a spin kernel (`torch.cuda._sleep`) a little longer than
  the call's measured launch time (nvbench's "blocking kernel"), so the start event fires when
  the candidate's first kernel is already queued: the Python/launch overhead of getting there
  is not device time (it is in the host latency). Measured on an H100: without it a 0.21 ms
  ReLU read 0.26-0.30 ms through a Python forward(). CPU: a monotonic clock bound when this
  module was imported, before any candidate code ran;
- server mode sleeps a random 1-20 ms before each call (cold clocks and caches, as in
  CUDA-L2's server mode); offline mode runs calls back to back;
- device time and host latency (wall clock around the call and the sync) are kept apart;
  the median, IQR and raw samples are returned as a `candidate.Timing`, the one timing record.
Three parts: the caller's `config.TimingBudget` (how long), `_Timer` (one call's window on a device) and `ProbeSchedule`
(which input set each timed call gets, for the content-cache probe, and which calls get fresh
content); `time_calls` runs them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc as _gc
import random
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import torch

from warpforge.candidate import Timing
from warpforge.config import TimingBudget

_perf_counter = time.perf_counter
_sleep = time.sleep
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_spin = getattr(torch.cuda, "_sleep", None)  # a kernel that busy-waits for N clock cycles


class L2Flusher:
    """Reads a buffer of twice the last-level cache before each timed call."""

    def __init__(self, device: str) -> None:
        self.device = device
        size = _cache_bytes(device) * 2
        self.buffer = torch.ones(max(size // 4, 1), dtype=torch.float32, device=device)

    def __call__(self) -> None:
        self.buffer.sum()


def _cache_bytes(device: str) -> int:
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return int(getattr(props, "L2_cache_size", 50 * 2**20) or 50 * 2**20)
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            text = f.read().strip()
        # CPU caches are flushed only up to 8 MiB (16 MiB read): a bigger read costs more than small tasks run
        return min(int(text.rstrip("K")) * 1024 if text.endswith("K") else int(text), 8 * 2**20)
    except (OSError, ValueError):
        return 8 * 2**20


def _keep_alive_cap(device: str) -> float:
    """Bytes of earlier calls' inputs kept alive (so their addresses are not handed out again):
    5 % of the GPU's memory on CUDA, where an input can be gigabytes; no cap on the CPU."""
    if device != "cuda":
        return float("inf")
    return 0.05 * torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory


def _nbytes(kept: deque[list[Any]]) -> int:
    return sum(x.numel() * x.element_size() for args in kept for x in args if isinstance(x, torch.Tensor))


def _spin_rate() -> float:
    """Clock cycles per millisecond of the spin kernel, measured once (clocks vary by GPU and boost)."""
    if _spin is None:
        return 0.0
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    _spin(1000)  # load the kernel
    _synchronize()
    start.record()
    _spin(2_000_000)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    return 2_000_000 / ms if ms > 0 else 0.0


# The most a measured sync round trip may take off a call: more would let work hidden on another
# stream during the floor's measurement go uncounted (measured round trips: 14-40 us on an H100 host).
SYNC_FLOOR_CAP_MS = 0.03


def sync_floor(n: int = 21) -> float:
    """The device time a device-wide synchronize adds to an untrusted call's window when nothing
    else is pending: a mark on the stream, the sync, the end event (the median of `n`, at most
    SYNC_FLOOR_CAP_MS). It is this process's own cost -- its host, its Python, its guard -- and
    it differed by 5-15 us between the reference's and the candidate's processes for the same
    code (an A/A pair of 0.2-0.3 ms tasks read 0.97-1.04x), so each process takes off its own."""
    _synchronize()
    tails = []
    for _ in range(n):
        mark, end = _Event(enable_timing=True), _Event(enable_timing=True)
        mark.record()
        _synchronize()
        end.record()
        end.synchronize()
        tails.append(mark.elapsed_time(end))
    return min(statistics.median(tails), SYNC_FLOOR_CAP_MS)


def matched_round_trip(wait_ms: float, cycles_per_ms: float) -> float:
    """The device time of a synchronize's round trip after a clean wait as long as the call just
    timed (the spin kernel for `wait_ms`, a mark, the sync, the end event), in this process, right
    after the call: what the call's own round trip would have been with nothing left on other
    streams. On an H100 the round trip grew with the wait (13 us idle, 30-60 us after 1 ms, up to
    160-220 us after 20 ms calls) and moved between 20 and 60 us from one round to the next, so
    one idle floor per round (sync_floor) let 5-20 us of noise into a 0.2 ms call's time."""
    mark, end = _Event(enable_timing=True), _Event(enable_timing=True)
    if _spin is not None and cycles_per_ms:
        _spin(int(wait_ms * cycles_per_ms))
    mark.record()
    _synchronize()
    end.record()
    end.synchronize()
    return mark.elapsed_time(end)


def summarize(device_ms: list[float], host_ms: list[float]) -> Timing:
    q = statistics.quantiles(device_ms, n=4) if len(device_ms) >= 2 else [device_ms[0]] * 3
    return Timing(median_ms=statistics.median(device_ms), iqr_ms=q[2] - q[0], min_ms=min(device_ms),
                  mean_ms=statistics.fmean(device_ms), n=len(device_ms), host_median_ms=statistics.median(host_ms),
                  samples_ms=tuple(device_ms))


# Of the timed calls after the probe's schedule, the share on fresh content (counted); the rest
# are on the verified sets, whose outputs are checked whole against the reference's summaries
# (a fresh call's output is checked only if the parent picks it afterwards: verdict.py).
FRESH_SHARE = 0.75


class ProbeSchedule:
    """Which input set each timed call gets, for the content-cache probe, and (`fresh`) whether it
    gets a never-seen variant of that set.

    The last `unseen_sets` sets were never given to the program before the timed loop; the rest
    are values it has seen (at new addresses now). The unseen ones go at random places among the
    first calls, not first (a slow start after the warm-up must not look like a content cache),
    between repeats of seen sets; after the schedule, sets are drawn at random, and each call is
    on fresh content with probability FRESH_SHARE when the caller can make it."""

    def __init__(self, n_sets: int, unseen_sets: int, rng: random.Random) -> None:
        self.n_sets, self.unseen_sets, self._rng = n_sets, unseen_sets, rng
        unseen = list(range(n_sets - unseen_sets, n_sets))
        self._unseen = set(unseen)
        seen_sets = max(n_sets - unseen_sets, 1)
        # a seen set first and last, the rest shuffled: every first-seen call then has repeats
        # beside it, at least 3 in all (shuffled alone, the unseen sets could land as the first or
        # the last three calls with only 2 repeats beside them, and the probe gave nothing)
        inner = unseen + [rng.randrange(seen_sets) for _ in range(2 * unseen_sets + 1)]
        rng.shuffle(inner)
        self._order = [rng.randrange(seen_sets)] + inner + [rng.randrange(seen_sets)]
        self._used: set[int] = set()
        self.first_seen: list[bool] = []

    @property
    def scheduled(self) -> int:
        """Calls the schedule places before sets are drawn at random."""
        return len(self._order)

    @property
    def min_calls(self) -> int:
        """Calls enough for the first-seen sets and the repeats beside them."""
        return 3 * self.unseen_sets + 3

    def fresh(self, i: int) -> bool:
        """Whether timed call `i` gets fresh content (asked before `next(i)`): never in the
        schedule, whose calls the probe compares; after it, at random."""
        return i >= len(self._order) and self._rng.random() < FRESH_SHARE

    def next(self, i: int, fresh: bool = False) -> int:
        """The set for timed call `i` (0, 1, ... in order); a call on the set itself (not `fresh`)
        is recorded as first seen or not."""
        index = self._order[i] if i < len(self._order) else self._rng.randrange(self.n_sets)
        if not fresh:
            self.first_seen.append(index in self._unseen and index not in self._used)
            self._used.add(index)
        return index

    def result(self, device_ms: list[float]) -> dict[str, float]:
        """The probe's numbers over the calls on the sets themselves (`next`'s, in order)."""
        return first_seen_and_repeats(device_ms, self.first_seen)


@dataclasses.dataclass
class _Window:
    """One call's timed window, as the timer measured it."""

    device_ms: float
    host_ms: float
    tail_ms: float | None = None
    round_trip_ms: float | None = None


class _Timer:
    """Times one call at a time on a device, outside-window work done by the caller: the L2
    flush, the spin that hides the launch, the device-wide synchronize and the sync round trip
    taken off it (CUDA), or a monotonic clock (CPU)."""

    def __init__(self, device: str, budget: TimingBudget, rng: random.Random, trusted_stream: bool) -> None:
        self.device, self.budget, self.rng, self.trusted = device, budget, rng, trusted_stream
        self.flush = L2Flusher(device)
        self.cycles_per_ms = _spin_rate() if device == "cuda" else 0.0
        self.floor_ms = sync_floor() if device == "cuda" and not trusted_stream else 0.0
        self.matched = budget.sync_floor == "matched" and bool(self.cycles_per_ms)
        self.launch_ms: list[float] = []  # host time from the call to its return, before the sync

    def time(self, call: Callable[[list[Any]], Any], args: list[Any]) -> tuple[_Window, Any]:
        self.flush()
        if self.budget.mode == "server":
            _sleep(self.rng.uniform(*self.budget.server_gap_ms) / 1000)
        if self.device != "cuda":
            h0 = _perf_counter()
            out = call(args)
            host = (_perf_counter() - h0) * 1e3
            return _Window(host, host), out
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        _synchronize()
        if self.cycles_per_ms and _spin is not None:
            # busy the GPU while the call is launched: twice the median launch time so far plus
            # 50 us for recording the start event and entering the call, at most 5 ms. (1.5x
            # alone was too short for fast launches: a 2.2 us cuBLAS kernel read 10-24 us.)
            hold_ms = min(2.0 * statistics.median(self.launch_ms) + 0.05, 5.0) if self.launch_ms else 0.2
            _spin(int(hold_ms * self.cycles_per_ms))
        start.record()
        h0 = _perf_counter()
        out = call(args)
        self.launch_ms.append((_perf_counter() - h0) * 1e3)
        if self.trusted:
            end.record()
            _synchronize()
            h1 = _perf_counter()
            end.synchronize()
            return _Window(start.elapsed_time(end), (h1 - h0) * 1e3), out
        # also mark where the caller's stream got to: end minus that mark is the sync's round
        # trip (plus any work left on other streams)
        on_stream = _Event(enable_timing=True)
        on_stream.record()
        _synchronize()
        end.record()
        h1 = _perf_counter()
        end.synchronize()
        # the stream's time plus whatever the sync waited for beyond its own round trip (work
        # left on other streams): the round trip is this process's, measured here
        tail, stream_ms = on_stream.elapsed_time(end), start.elapsed_time(on_stream)
        round_trip = self.floor_ms
        if self.matched:
            round_trip = min(matched_round_trip(stream_ms, self.cycles_per_ms), SYNC_FLOOR_CAP_MS + 0.01 * stream_ms)
        return _Window(stream_ms + max(0.0, tail - round_trip), (h1 - h0) * 1e3, tail, round_trip), out


@contextlib.contextmanager
def heap_frozen() -> Iterator[None]:
    """Freeze the heap as it is (after one collection) for the timing runs inside: each
    `time_calls` starts with a full collection, which over a process holding torch, Triton and
    compiled kernels took 33-60 ms on this project's CPU machine (192,000 objects;
    lab/gemm_tune_overhead.py). Frozen objects are skipped, so the runs only scan what
    was allocated since. For a sweep that makes dozens of timing runs per item (the GEMM tuner
    and benchmark); the evaluator's processes freeze once at start-up instead. Unfrozen on the
    way out, errors too, unless the heap was frozen already: the dispatcher's tuning on first use
    runs inside a caller's process, whose own freeze must outlast it."""
    frozen_before = _gc.get_freeze_count()
    _gc.collect()
    _gc.freeze()
    try:
        yield
    finally:
        if not frozen_before:
            _gc.unfreeze()


def time_calls(
    call: Callable[[list[Any]], Any],
    prepare: Callable[[int], list[Any]],
    n_sets: int,
    device: str,
    *,
    after_call: Callable[[int, list[Any], Any, bool], None] | None = None,
    rng: random.Random | None = None,
    unseen_sets: int = 0,
    trusted_stream: bool = False,
    fresh: Callable[[int], list[Any]] | None = None,
    budget: TimingBudget | None = None,
    **fields: Any,
) -> Timing:
    """Time `call(prepare(i))` over rotating input sets with `budget` (an EvalConfig's timing
    group, as the evaluator's processes and the GEMM tuner pass it; default TimingBudget()), any
    of its fields given as keywords on top (`time_calls(..., rep_ms=30)`).

    `after_call(set_index, args, output, fresh)` runs outside the timed window (the evaluator checks
    and fingerprints the outputs of timed calls there). The warm-up call count is randomised so a candidate cannot
    count its way to the first timed call. The last `unseen_sets` sets are first seen in the
    timed loop (ProbeSchedule).

    `fresh(i)`: inputs no call has seen, derived from set i (a new variant each time). Given it,
    the statistics are those of the calls on such inputs only: a content cache, exact or
    approximate, cannot hit on a counted call, whatever it would gain. Calls on the sets
    themselves (`prepare`) are interleaved, checked by `after_call` and used by the content-cache
    probe, but not counted; `after_call`'s last argument says which a call was. Without it every
    timed call is on a set itself, and counted.

    `trusted_stream=True` records the end event on the caller's stream right after the call, before
    the device-wide synchronize, so the ~20 us sync round trip is not counted. Only for code known to
    run all its work on the current stream (the GEMM track's own kernels, cuBLAS, cuBLASLt); a
    candidate under evaluation is never timed this way, since it could hide work on another stream.

    Otherwise a call's time is its stream's time plus whatever the device-wide synchronize waited
    beyond its own round trip (work left on other streams). `TimingBudget.sync_floor` says what that round
    trip is taken to be: "matched" (default), a clean round trip after a wait as long as the call,
    measured right after each call (`matched_round_trip`; at most SYNC_FLOOR_CAP_MS plus 1 % of
    the call); "idle", one round trip per timing run with nothing pending (`sync_floor`).
    """
    plan = dataclasses.replace(budget or TimingBudget(), **fields)
    # Python's cyclic garbage collector off while timing, as timeit does: a collection landing
    # inside a timed call adds its pause to that call, and how often one lands depends on how
    # much the process allocates between calls (the candidate's checks allocate more than the
    # reference's loop: an A/A bias on the CPU). Reference counting still frees everything.
    was_enabled = _gc.isenabled()
    _gc.collect()
    _gc.disable()
    try:
        return _time_calls(call, prepare, n_sets, device, plan, after_call, rng or random.Random(), unseen_sets,
                           trusted_stream, fresh)
    finally:
        if was_enabled:
            _gc.enable()


def _time_calls(call: Callable[[list[Any]], Any], prepare: Callable[[int], list[Any]], n_sets: int, device: str,
                plan: TimingBudget, after_call: Callable[[int, list[Any], Any, bool], None] | None, rng: random.Random,
                unseen_sets: int, trusted_stream: bool, fresh: Callable[[int], list[Any]] | None) -> Timing:
    timer = _Timer(device, plan, rng, trusted_stream)
    keep_alive: deque[list[Any]] = deque(maxlen=max(2 * n_sets, 4))
    keep_cap = _keep_alive_cap(device)
    windows: list[_Window] = []  # the counted calls'
    on_sets: list[float] = []  # the device times of calls on the sets themselves (the probe's)

    def one(index: int, record: bool, new_content: bool = False) -> None:
        # (`record` and `counted` are read by test fixtures' instrumentation: keep the names)
        counted = record and (new_content or fresh is None)
        args = fresh(index) if new_content and fresh is not None else prepare(index)
        keep_alive.append(args)
        # big inputs: fewer kept (at least 1); no count of bytes on the CPU, where there is no cap
        while keep_cap < float("inf") and len(keep_alive) > 1 and _nbytes(keep_alive) > keep_cap:
            keep_alive.popleft()
        window, out = timer.time(call, args)
        if record:
            if counted:
                windows.append(window)
            if not new_content:
                on_sets.append(window.device_ms)
            if after_call is not None:
                after_call(index, args, out, new_content)
        del out

    warm_start = _perf_counter()
    estimates: list[float] = []
    calls = 0
    while calls < 2 + rng.randrange(3) or (_perf_counter() - warm_start) * 1e3 < plan.warmup_ms:
        t0 = _perf_counter()
        one(0, record=False)  # only set 0: the others are first seen in the timed loop (see below)
        estimates.append((_perf_counter() - t0) * 1e3)  # the whole iteration: clones and flush included
        calls += 1
        if calls >= plan.max_reps:
            break
    per_call = max(statistics.median(estimates), 1e-3)
    probe = ProbeSchedule(n_sets, unseen_sets, rng)
    reps = int(min(max(plan.rep_ms / per_call, plan.min_reps, probe.min_calls), max(plan.max_reps, probe.min_calls)))
    loop_start = _perf_counter()
    i = 0
    # `reps` calls in all, and at least min_reps counted ones (with `fresh`, the probe's scheduled
    # calls and about a quarter of the rest are on the sets themselves and not counted)
    while i < reps or len(windows) < plan.min_reps:
        # per-call overheads outside the window (clones, flush, fingerprints) can dwarf a tiny
        # kernel: stop at 4x the budget in wall time once there are min_reps samples
        if (i >= probe.scheduled and len(windows) >= plan.min_reps
                and (_perf_counter() - loop_start) * 1e3 > 4 * plan.rep_ms):
            break
        new_content = fresh is not None and probe.fresh(i)
        one(probe.next(i, new_content), record=True, new_content=new_content)
        i += 1
    device_ms = [w.device_ms for w in windows]
    summary = summarize(device_ms, [w.host_ms for w in windows])
    tails = [w.tail_ms for w in windows if w.tail_ms is not None]
    trips = [w.round_trip_ms for w in windows if w.round_trip_ms is not None]
    if tails:
        summary = dataclasses.replace(summary, tail_median_ms=statistics.median(tails),
                                      sync_floor_ms=statistics.median(trips) if timer.matched else timer.floor_ms)
    probed = probe.result(on_sets)
    return dataclasses.replace(summary, first_seen_min_ms=probed.get("first_seen_min_ms"),
                               repeat_median_ms=probed.get("repeat_median_ms"))


def first_seen_and_repeats(device_ms: list[float], first_seen: list[bool]) -> dict[str, float]:
    """The content-cache probe's two numbers: the fastest call on a set first seen in the timed
    loop (`first_seen_min_ms`) and the median of the calls next to those on sets seen before
    (`repeat_median_ms`); {} without first-seen calls or with fewer than 3 repeats beside them.

    The last `unseen_sets` sets were never given to the program before the timed loop; the rest
    are values it has seen (at new addresses now). A program much faster on values it has seen is
    caching results by content. Repeats are taken from the calls next to the first-seen ones, not
    from the whole run: on a CPU the first dozen timed calls can run 3-5x slower than the rest
    (measured: 1.0 ms, then 0.2 ms), and first-seen calls are among the first by design."""
    fresh_at = [i for i, f in enumerate(first_seen) if f]
    fresh = [device_ms[i] for i in fresh_at]
    near = sorted({j for i in fresh_at for j in range(i - 2, i + 3) if 0 <= j < len(device_ms) and not first_seen[j]})
    repeat = [device_ms[j] for j in near]
    if not fresh or len(repeat) < 3:
        return {}
    return {"first_seen_min_ms": min(fresh), "repeat_median_ms": statistics.median(repeat)}
