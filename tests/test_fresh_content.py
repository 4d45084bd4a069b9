"""Caches cannot buy speed (issue 40): counted timed calls run on content no call has seen.

The variants (inputs.fresh_variant) are new, reproducible from their seed, and keep what the
task's inputs promise element by element; the parent checks a few fresh calls per round after
the fact (verdict.fresh_calls_to_check); and end to end, a torch.matmul memoised by content
never hits on a counted call, so it cannot claim to be faster.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

from warpforge import Candidate, EvalConfig, evaluate, load_task
from warpforge.evaluate.inputs import DEFAULT_DISTS, checked_partners, fresh_variant, mix_partners, partner_of
from warpforge.evaluate.protocol import FreshChecked, Loaded
from warpforge.evaluate.sandbox import ChildOutcome
from warpforge.evaluate.verdict import (FRESH_CHECKS_PER_ROUND, Reference, _timed_calls_problem, fresh_calls_to_check,
                                        fresh_summaries)
from warpforge.evaluate.verify import RefSummary, Tolerance

FIXTURES = Path(__file__).parent / "fixtures"


def test_a_variant_is_new_content_made_again_bit_for_bit_from_its_seed() -> None:
    base = [torch.randn(64, 32), torch.randint(0, 10, (64,)), 2.0]
    other = [torch.randn(64, 32), torch.randint(0, 10, (64,)), 3.0]
    first, again, another = fresh_variant(base, other, 7), fresh_variant(base, other, 7), fresh_variant(base, other, 8)
    assert torch.equal(first[0], again[0]) and not torch.equal(first[0], another[0])
    assert not torch.equal(first[0], base[0]) and not torch.equal(first[0], other[0])
    # every element is one of the two sets' at that position
    assert bool(((first[0] == base[0]) | (first[0] == other[0])).all())
    # integer tensors and numbers are the base set's (indices, targets), copied
    assert torch.equal(first[1], base[1]) and first[1].data_ptr() != base[1].data_ptr() and first[2] == 2.0


def test_a_variant_keeps_zeros_symmetry_and_layout() -> None:
    lower, lower2 = torch.randn(16, 16).tril(), torch.randn(16, 16).tril()
    sym, sym2 = torch.randn(16, 16), torch.randn(16, 16)
    sym, sym2 = sym + sym.T, sym2 + sym2.T
    wide = torch.randn(8, 4).T  # a transposed (non-contiguous) input
    tri, symmetric, strided = fresh_variant([lower, sym, wide], [lower2, sym2, torch.randn(4, 8)], 3)
    assert torch.equal(tri, tri.tril())
    assert torch.equal(symmetric, symmetric.T)
    assert strided.stride() == wide.stride()
    # a partner of another shape: the base reversed stands in
    line = torch.arange(6.0)
    odd = fresh_variant([line], [torch.arange(4.0)], 1)[0]
    assert bool(((odd == line) | (odd == line.flip(0))).all()) and not torch.equal(odd, line)


def test_partners_are_the_sets_drawn_with_the_same_distribution() -> None:
    partners = mix_partners(11, DEFAULT_DISTS)  # set i takes DEFAULT_DISTS[i % 5]
    assert partners[0] == [3, 5, 8, 10] and partners[1] == [6] and partners[4] == [9]
    assert mix_partners(3, DEFAULT_DISTS) == [[1, 2], [0, 2], [0, 1]]  # none alike: any other
    assert all(partner_of(0, seed, partners) in partners[0] for seed in range(20))
    # the draw's file says which; one rewritten into a set's own or out of range is not used
    assert checked_partners([[1], [0]], 2) == [[1], [0]]
    assert checked_partners([[0], [1]], 2) == checked_partners([[1], [7]], 2) == checked_partners(None, 2) == [[1], [0]]


def _reference() -> Reference:
    return Reference([4], 2, [torch.float32], [Tolerance(1e-4, 1e-4)], Loaded(None, None, {}), {}, [], 0.0, 1)


def _summary(values: list[float]) -> RefSummary:
    t = torch.tensor(values, dtype=torch.float64)
    return RefSummary(t, float(t.norm()), float(t.abs().max()))


def test_fresh_calls_are_checked_only_when_picked_and_then_like_any_timed_call() -> None:
    right, wrong = {"norm": 5.0, "values": [3.0, 4.0]}, {"norm": 5.0, "values": [4.0, 3.0]}
    summaries: dict[tuple[int, ...], RefSummary] = {(0, 0): _summary([3.0, 4.0]), (1, 0): _summary([1.0, 0.0])}
    reference = _reference()
    assert _timed_calls_problem([[0, [right]], [1, [wrong], 99]], reference, summaries) is None  # 99 not picked
    summaries[(1, 0, 99)] = _summary([3.0, 4.0])
    assert _timed_calls_problem([[1, [right], 99]], reference, summaries) is None
    problem = _timed_calls_problem([[1, [wrong], 99]], reference, summaries)
    assert problem is not None and "wrong" in problem
    assert "never drawn" in str(_timed_calls_problem([[5, [right], 1]], reference, summaries))
    assert "malformed" in str(_timed_calls_problem([[1, [right], "99"]], reference, summaries))


def test_the_parent_picks_a_few_well_formed_fresh_calls_a_round() -> None:
    prints = [[0, [None]]] + [[1, [None], seed] for seed in range(10)] + [[7, [None], 5], [1, [None], -1], "junk"]
    rounds = [{"type": "bench", "timing": {}, "fingerprints": prints},
              {"type": "bench_round", "timing": {}, "fingerprints": prints[:3]}]
    calls = fresh_calls_to_check(ChildOutcome(messages=rounds), 2, random.Random(0))
    assert len(calls) == FRESH_CHECKS_PER_ROUND + 2
    assert all(index == 1 and 0 <= seed < 10 for index, seed in calls)
    reply = FreshChecked([[{"values": [1.0], "norm": 1.0, "scale": 1.0}] for _ in calls])
    assert set(fresh_summaries(calls, reply)) == {(1, 0, seed) for _, seed in calls}


def test_a_content_memoising_matmul_never_hits_on_a_counted_call_and_is_not_faster() -> None:
    """tests/fixtures/attacks/content_memo.py: torch.matmul behind an exact content cache (every
    output right). It prints how many of its hits were on counted timed calls: none, whatever the
    machine's load; so it cannot read faster than the product it computes every counted call."""
    config = EvalConfig.of(device="cpu", trials=5, warmup_ms=5.0, rep_ms=20.0, min_reps=5, timeout_s=120.0, bench=True,
                        static_checks=False)  # (the fixture's instrumentation reads frames)
    result = evaluate(load_task(FIXTURES / "tasks" / "matmul.py"),
                      Candidate.from_file(FIXTURES / "attacks" / "content_memo.py"), config)
    assert result.status == "correct", result.reason
    reports = [line for line in result.output_tail.splitlines() if line.startswith("CONTENT-MEMO ")]
    assert reports, result.output_tail[-2000:]
    totals = dict(field.split("=") for field in reports[-1].split()[1:])
    assert totals["counted_hits"] == "0" and int(totals["counted_calls"]) >= 10, reports[-1]
    assert result.claim.verdict != "faster", result.claim.words
