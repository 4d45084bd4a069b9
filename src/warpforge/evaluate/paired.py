"""Paired timing: the reference and the candidate timed in alternating rounds, in one window.

The parent drives it while the candidate process waits between rounds: each round times the
task's program (in the clean reference process) and the candidate (in its own), back to back,
on the same input sets, the order of the two drawn at random per round, so drift of clocks,
thermals and machine load falls on both. The speedup is the median of the rounds' ratios and
comes with an interval (metrics.paired_speedup); an interval wider than the bound that also
straddles 1 (widened by the process spread, as the verdict will widen it) is measured again with
as many rounds more — the rounds that can still change the claim (claim.py). It does not time
anything itself: `time_reference` and the candidate's process do, with bench.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from warpforge import metrics


class Rounds:
    """The schedule and the record of one candidate's paired rounds."""

    def __init__(self, rounds: int, bound: float, time_reference: Callable[[bool], dict[str, Any]],
                 rng: random.Random, spread: float = 0.0) -> None:
        """`time_reference(first)`: one timing run of the task's program; `first` for the run
        paired with the candidate's first timing run, which has the first run's budget (a full
        warm-up and repetition budget) where later rounds have half: a pair is timed alike."""
        self.target = rounds
        self.rounds = rounds
        self.bound = bound
        self.spread = spread
        self.time_reference = time_reference
        self.rng = rng
        self.reference_first: list[bool] = []
        self.reference: list[dict[str, Any]] = []
        self.candidate_ms: list[float] = []

    def start_round(self) -> None:
        """Before the candidate's next round: draw the order; time the reference now if it goes first."""
        self.reference_first.append(self.rng.random() < 0.5)
        if self.reference_first[-1]:
            self.reference.append(self.time_reference(len(self.reference_first) == 1))

    def after_candidate(self, timing: Any) -> bool:
        """The candidate's round is in: finish the round; True when another round is wanted. A
        malformed timing (the candidate's process sends it) ends the rounds; decide() judges it."""
        try:
            self.candidate_ms.append(float(timing["median_ms"]))
        except (TypeError, KeyError, ValueError):
            return False
        if not self.reference_first[-1]:
            self.reference.append(self.time_reference(len(self.candidate_ms) == 1))
        done = len(self.candidate_ms)
        if done < self.target:
            return True
        if done == self.rounds and self.undecided():  # measure again, once, with as many rounds more
            self.target = 2 * self.rounds
            return True
        return False

    def undecided(self) -> bool:
        """Wider than the bound and, widened by the process spread, straddling 1: more rounds may
        decide it. A wide interval wholly above (or below) 1 is already decided and keeps its claim."""
        _, (low, high) = metrics.paired_speedup(self.reference_medians(), self.candidate_ms)
        return unstable(low, high, self.bound, self.spread)

    def reference_medians(self) -> list[float]:
        return [float(t["median_ms"]) for t in self.reference]


def unstable(low: float, high: float, bound: float, spread: float) -> bool:
    """The rounds' interval [low, high] is wider than `bound` (high / low - 1) and, widened by
    the process spread, still holds 1: `timing_unstable`, a description of an undecided interval."""
    return high / low - 1 > bound and low / (1 + spread) <= 1.0 <= high * (1 + spread)


PAIR_MEMORY_FRACTION = 0.85
"""Of the GPU's memory, what paired timing's two processes may plan to hold at once; the rest is
for the candidate's own workspace, the CUDA contexts and the spare candidate processes."""


def pair_gpu_bytes(sets: int, input_bytes: int, output_bytes: int) -> int:
    """What paired timing holds on the GPU at once, both processes together: each process's
    timing sets, one set's clone and its copy for the mutation check, and two outputs (the
    call's and the previous one, which the allocator may not have reused yet)."""
    return 2 * ((sets + 2) * input_bytes + 2 * output_bytes)


def pair_memory_note(sets: int, input_bytes: int, output_bytes: int, gpu_memory_gb: float | None) -> str | None:
    """Why paired timing cannot run on this GPU for sets of this size (a warning for the
    result: the reference is then timed once, in its clean process, before the candidate
    holds its inputs), or None when it fits or the GPU's memory is unknown."""
    if not gpu_memory_gb:
        return None
    need = pair_gpu_bytes(sets, input_bytes, output_bytes)
    if need <= PAIR_MEMORY_FRACTION * gpu_memory_gb * 2**30:
        return None
    return (f"paired timing off: the two processes would hold {need / 2**30:.0f} GiB of {gpu_memory_gb:.0f} GiB "
            f"at once ({sets} sets of {input_bytes / 2**30:.2f} GiB inputs); the speedup is against the task's "
            "program timed once, in its clean process, so no paired interval is claimed")
