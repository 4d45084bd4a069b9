"""The one timing function. Every speed number warpforge reports comes from `time_calls`.

Method (after triton.testing.do_bench, hardened for adversarial code):
- warm-up and repetitions are time budgets (25 ms / 100 ms by default), clamped to a count;
- before every call the inputs are fresh clones (new addresses) of one of several verified
  input sets, made outside the timed window; earlier clones stay alive a while so an
  address cannot be recycled to hit a cache keyed on pointers;
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
  the median, IQR and raw samples are returned.
"""

from __future__ import annotations

import gc as _gc
import random
import statistics
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

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


def summarize(device_ms: list[float], host_ms: list[float]) -> dict[str, Any]:
    q = statistics.quantiles(device_ms, n=4) if len(device_ms) >= 2 else [device_ms[0]] * 3
    return {
        "median_ms": statistics.median(device_ms),
        "iqr_ms": q[2] - q[0],
        "min_ms": min(device_ms),
        "mean_ms": statistics.fmean(device_ms),
        "n": len(device_ms),
        "host_median_ms": statistics.median(host_ms),
        "samples_ms": device_ms,
    }


def time_calls(
    call: Callable[[list[Any]], Any],
    prepare: Callable[[int], list[Any]],
    n_sets: int,
    device: str,
    *,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    min_reps: int = 10,
    max_reps: int = 300,
    mode: str = "offline",
    gap_ms: tuple[float, float] = (1.0, 20.0),
    after_call: Callable[[int, list[Any], Any], None] | None = None,
    rng: random.Random | None = None,
    unseen_sets: int = 0,
    trusted_stream: bool = False,
    sync_floor: str = "matched",
) -> dict[str, Any]:
    """Time `call(prepare(i))` over rotating input sets; return summary stats with raw samples.

    `after_call(set_index, args, output)` runs outside the timed window (the evaluator checks
    and fingerprints the outputs of timed calls there). The warm-up call count is randomised so a candidate cannot
    count its way to the first timed call.

    `trusted_stream=True` records the end event on the caller's stream right after the call, before
    the device-wide synchronize, so the ~20 us sync round trip is not counted. Only for code known to
    run all its work on the current stream (the GEMM track's own kernels, cuBLAS, cuBLASLt); a
    candidate under evaluation is never timed this way, since it could hide work on another stream.

    Otherwise a call's time is its stream's time plus whatever the device-wide synchronize waited
    beyond its own round trip (work left on other streams). `sync_floor` says what that round
    trip is taken to be: "matched" (default), a clean round trip after a wait as long as the call,
    measured right after each call (`matched_round_trip`; at most SYNC_FLOOR_CAP_MS plus 1 % of
    the call); "idle", one round trip per timing run with nothing pending (`sync_floor`).
    """
    # Python's cyclic garbage collector off while timing, as timeit does: a collection landing
    # inside a timed call adds its pause to that call, and how often one lands depends on how
    # much the process allocates between calls (the candidate's checks allocate more than the
    # reference's loop: an A/A bias on the CPU). Reference counting still frees everything.
    was_enabled = _gc.isenabled()
    _gc.collect()
    _gc.disable()
    try:
        return _time_calls(call, prepare, n_sets, device, warmup_ms=warmup_ms, rep_ms=rep_ms, min_reps=min_reps,
                           max_reps=max_reps, mode=mode, gap_ms=gap_ms, after_call=after_call, rng=rng,
                           unseen_sets=unseen_sets, trusted_stream=trusted_stream, floor_rule=sync_floor)
    finally:
        if was_enabled:
            _gc.enable()


def _time_calls(call: Callable[[list[Any]], Any], prepare: Callable[[int], list[Any]], n_sets: int, device: str, *,
                warmup_ms: float, rep_ms: float, min_reps: int, max_reps: int, mode: str, gap_ms: tuple[float, float],
                after_call: Callable[[int, list[Any], Any], None] | None, rng: random.Random | None, unseen_sets: int,
                trusted_stream: bool, floor_rule: str) -> dict[str, Any]:
    rng = rng or random.Random()
    flush = L2Flusher(device)
    keep_alive: deque[list[Any]] = deque(maxlen=max(2 * n_sets, 4))
    cycles_per_ms = _spin_rate() if device == "cuda" else 0.0
    launch_ms: list[float] = []  # host time from the call to its return, before the sync
    tail_ms: list[float] = []  # device time from the caller's stream's end to the end after the sync
    matched_ms: list[float] = []  # the matched round trips (floor_rule "matched")
    floor_ms = sync_floor() if device == "cuda" and not trusted_stream else 0.0
    if floor_rule not in ("matched", "idle"):
        raise ValueError(f"sync_floor must be 'matched' or 'idle', not {floor_rule!r}")
    matched = floor_rule == "matched" and bool(cycles_per_ms)

    keep_cap = _keep_alive_cap(device)

    def one(index: int, record: bool) -> tuple[float, float]:
        args = prepare(index)
        keep_alive.append(args)
        # big inputs: fewer kept (at least 1); no count of bytes on the CPU, where there is no cap
        while keep_cap < float("inf") and len(keep_alive) > 1 and _nbytes(keep_alive) > keep_cap:
            keep_alive.popleft()
        flush()
        if mode == "server":
            _sleep(rng.uniform(*gap_ms) / 1000)
        if device == "cuda":
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _synchronize()
            if cycles_per_ms and _spin is not None:
                # busy the GPU while the call is launched: twice the median launch time so far plus
                # 50 us for recording the start event and entering the call, at most 5 ms. (1.5x
                # alone was too short for fast launches: a 2.2 us cuBLAS kernel read 10-24 us.)
                hold_ms = min(2.0 * statistics.median(launch_ms) + 0.05, 5.0) if launch_ms else 0.2
                _spin(int(hold_ms * cycles_per_ms))
            start.record()
            h0 = _perf_counter()
            out = call(args)
            launch_ms.append((_perf_counter() - h0) * 1e3)
            if trusted_stream:
                end.record()
                _synchronize()
            else:
                # also mark where the caller's stream got to: end minus that mark is the sync's
                # round trip (plus any work left on other streams), reported as tail_ms
                on_stream = _Event(enable_timing=True)
                on_stream.record()
                _synchronize()
                end.record()
            h1 = _perf_counter()
            end.synchronize()
            dev_ms = start.elapsed_time(end)
            if not trusted_stream:
                # the stream's time plus whatever the sync waited for beyond its own round trip
                # (work left on other streams): the round trip is this process's, measured below
                tail = on_stream.elapsed_time(end)
                stream_ms = start.elapsed_time(on_stream)
                round_trip = floor_ms
                if matched:
                    round_trip = min(matched_round_trip(stream_ms, cycles_per_ms),
                                     SYNC_FLOOR_CAP_MS + 0.01 * stream_ms)
                dev_ms = stream_ms + max(0.0, tail - round_trip)
                if record:
                    tail_ms.append(tail)
                    if matched:
                        matched_ms.append(round_trip)
        else:
            h0 = _perf_counter()
            out = call(args)
            h1 = _perf_counter()
            dev_ms = (h1 - h0) * 1e3
        if record and after_call is not None:
            after_call(index, args, out)
        del out
        return dev_ms, (h1 - h0) * 1e3

    warm_start = _perf_counter()
    estimates: list[float] = []
    calls = 0
    while calls < 2 + rng.randrange(3) or (_perf_counter() - warm_start) * 1e3 < warmup_ms:
        t0 = _perf_counter()
        one(0, record=False)  # only set 0: the others are first seen in the timed loop (see below)
        estimates.append((_perf_counter() - t0) * 1e3)  # the whole iteration: clones and flush included
        calls += 1
        if calls >= max_reps:
            break
    per_call = max(statistics.median(estimates), 1e-3)
    # enough calls for the first-seen sets plus repeats (the content-cache comparison)
    reps = int(min(max(rep_ms / per_call, min_reps, 3 * unseen_sets + 3), max(max_reps, 3 * unseen_sets + 3)))
    device_ms, host_ms, first_seen = [], [], []
    unseen = list(range(n_sets - unseen_sets, n_sets))
    # the unseen sets go at random places among the first calls, not first: a slow start after
    # the warm-up must not look like a content cache
    seen_sets = max(n_sets - unseen_sets, 1)
    schedule = unseen + [rng.randrange(seen_sets) for _ in range(2 * len(unseen) + 3)]
    rng.shuffle(schedule)
    used: set[int] = set()
    loop_start = _perf_counter()
    for i in range(reps):
        # per-call overheads outside the window (clones, flush, fingerprints) can dwarf a tiny
        # kernel: stop at 4x the budget in wall time once there are min_reps samples
        if i >= max(min_reps, len(schedule)) and (_perf_counter() - loop_start) * 1e3 > 4 * rep_ms:
            break
        index = schedule[i] if i < len(schedule) else rng.randrange(n_sets)
        d, h = one(index, record=True)
        device_ms.append(d)
        host_ms.append(h)
        first_seen.append(index in unseen and index not in used)
        used.add(index)
    summary = summarize(device_ms, host_ms)
    if tail_ms:
        summary["tail_median_ms"] = statistics.median(tail_ms)
        summary["sync_floor_ms"] = statistics.median(matched_ms) if matched_ms else floor_ms
    summary.update(first_seen_and_repeats(device_ms, first_seen))
    return summary


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
