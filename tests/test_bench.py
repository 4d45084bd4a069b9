"""bench.py: the timing function's sample bookkeeping, with fake programs that sleep."""

import time

from warpforge.evaluate import bench
from warpforge.evaluate import content_cache_suspected

N_SETS, UNSEEN = 8, 3


def timed(call):
    return bench.time_calls(call, lambda i: [i], N_SETS, "cpu", warmup_ms=1, rep_ms=30, min_reps=5,
                            max_reps=40, unseen_sets=UNSEEN)


def test_a_content_cache_is_reported():
    seen = set(range(N_SETS - UNSEEN))  # the verified sets: seen during verification

    def cache(args):
        if args[0] in seen:
            time.sleep(0.001)
        else:
            seen.add(args[0])
            time.sleep(0.02)

    summary = timed(cache)
    assert summary.first_seen_min_ms is not None and summary.first_seen_min_ms > 15
    assert summary.repeat_median_ms is not None and summary.repeat_median_ms < 10
    assert content_cache_suspected(summary.to_dict()) is not None


def test_an_honest_program_is_not_reported():
    summary = timed(lambda args: time.sleep(0.005))
    assert "first_seen_min_ms" in summary.to_dict()
    assert content_cache_suspected(summary.to_dict()) is None


def test_every_unseen_set_is_timed_and_samples_are_kept():
    calls = []
    summary = timed(lambda args: calls.append(args[0]))
    assert set(range(N_SETS - UNSEEN, N_SETS)) <= set(calls)
    assert summary.n == len(summary.samples_ms) >= 3 * UNSEEN + 3
    assert summary.min_ms <= summary.median_ms <= max(summary.samples_ms)


def test_the_content_cache_probe_compares_first_seen_calls_with_the_repeats_beside_them() -> None:
    """bench.first_seen_and_repeats: the fastest first-seen call against the median of the (up to
    two each side) calls on seen sets beside it, not the run's median (slow early CPU calls)."""
    from warpforge.evaluate.bench import first_seen_and_repeats

    # a slow start (5 ms), then 1 ms repeats; the first-seen calls at 3 and 7 read 1.1 and 0.9 ms
    times = [5.0, 5.0, 1.0, 1.1, 1.0, 1.0, 1.0, 0.9, 1.0, 1.0, 1.0, 1.0]
    seen = [i in (3, 7) for i in range(len(times))]
    probe = first_seen_and_repeats(times, seen)
    assert probe == {"first_seen_min_ms": 0.9, "repeat_median_ms": 1.0}
    cache = [1.0 if s else 0.1 for s in seen]  # much faster on values it has seen
    assert first_seen_and_repeats(cache, seen)["repeat_median_ms"] == 0.1
    assert first_seen_and_repeats(times, [False] * len(times)) == {}  # no first-seen call
    assert first_seen_and_repeats([1.0, 1.0], [True, False]) == {}  # fewer than 3 repeats beside it


def test_every_probe_schedule_leaves_repeats_beside_its_first_seen_calls() -> None:
    # the probe needs at least 3 repeats next to the first-seen calls; a schedule that put the
    # unseen sets first or last (about 1 in 100 shuffles) left 2, and the probe then said nothing
    import random

    for seed in range(2000):
        probe = bench.ProbeSchedule(N_SETS, UNSEEN, random.Random(seed))
        order = [probe.next(i) for i in range(probe.scheduled)]
        assert probe.scheduled == probe.min_calls
        assert set(range(N_SETS - UNSEEN, N_SETS)) <= set(order)
        assert not probe.first_seen[0] and not probe.first_seen[-1], (seed, order)
        assert probe.result([1.0] * probe.scheduled), (seed, order)


def test_no_counted_call_runs_on_content_seen_before() -> None:
    """Given `fresh`, the statistics are the fresh calls' only, and no such call gets content any
    call saw before (the verified sets, the warm-up's, the sets' own timed calls, earlier fresh
    calls): a cache keyed on content never hits on a counted call. Calls on the sets themselves
    are interleaved (the probe's), not counted. No timing is asserted."""
    import itertools

    made = itertools.count()
    seen = {("set", i) for i in range(N_SETS - UNSEEN)}  # what verification gave the program
    calls: list[tuple[bool, bool]] = []  # (fresh, a hit on content seen before) per timed call

    def memo(args: list) -> bool:  # type: ignore[type-arg]
        hit = args[0] in seen
        seen.add(args[0])
        return hit

    summary = bench.time_calls(memo, lambda i: [("set", i)], N_SETS, "cpu", unseen_sets=UNSEEN,
                               fresh=lambda i: [("fresh", i, next(made))],
                               after_call=lambda i, args, hit, fresh: calls.append((fresh, hit)),
                               warmup_ms=1, rep_ms=5, min_reps=20, max_reps=40)
    assert summary.n == len(summary.samples_ms) == sum(fresh for fresh, _ in calls) >= 20
    assert not any(hit for fresh, hit in calls if fresh)
    assert sum(not fresh for fresh, _ in calls) >= 3 * UNSEEN + 3  # the probe's schedule, on the sets
    assert summary.first_seen_min_ms is not None  # ... which the probe still reads


def test_heap_frozen_unfreezes_only_what_it_froze() -> None:
    """The tuner freezes the heap per shape; run inside a process that froze its own heap (the
    dispatcher tuning a shape on first use), it must leave that freeze in place."""
    import gc

    frozen_by_others = gc.get_freeze_count()
    gc.unfreeze()  # a known start; put back below
    try:
        with bench.heap_frozen():
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() == 0
        gc.freeze()
        before = gc.get_freeze_count()
        with bench.heap_frozen():
            pass
        assert gc.get_freeze_count() >= before > 0
    finally:
        gc.unfreeze()
        if frozen_by_others:
            gc.freeze()
