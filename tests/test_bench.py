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
    assert summary["first_seen_min_ms"] > 15 and summary["repeat_median_ms"] < 10
    assert content_cache_suspected(summary) is not None


def test_an_honest_program_is_not_reported():
    summary = timed(lambda args: time.sleep(0.005))
    assert "first_seen_min_ms" in summary
    assert content_cache_suspected(summary) is None


def test_every_unseen_set_is_timed_and_samples_are_kept():
    calls = []
    summary = timed(lambda args: calls.append(args[0]))
    assert set(range(N_SETS - UNSEEN, N_SETS)) <= set(calls)
    assert summary["n"] == len(summary["samples_ms"]) >= 3 * UNSEEN + 3
    assert summary["min_ms"] <= summary["median_ms"] <= max(summary["samples_ms"])
