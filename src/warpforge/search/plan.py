"""What a search strategy decides for one slot of a generation, and the rules every strategy shares.

A strategy (one module each: best_of_n.py, evolve.py) looks at the attempts so far and returns
`Plan`s: which prompt strategy to use and which earlier attempts to show. The loop turns a plan
into a prompt, an LLM call, a candidate and an evaluation. `beats` is the search's acceptance
rule, the one noise rule (metrics.faster_beyond_noise) between two candidates: a candidate counts
as better only when it wins by more than the measured spread. The incumbent only steers the
search; what a run reports as a task's best and "improved" is archive.best_attempt /
improves_on_eager.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from warpforge.archive import Attempt
from warpforge.metrics import faster_beyond_noise


@dataclass(frozen=True)
class Plan:
    strategy: str
    """translate | repair | optimise | contrastive | crossover | retrieval"""
    island: int = 0
    current: Attempt | None = None
    """repair / optimise: the attempt to fix or improve."""
    variants: tuple[Attempt, ...] = ()
    """contrastive: scored earlier attempts from different performance buckets."""
    parents: tuple[Attempt, ...] = ()
    """crossover: the attempts to combine."""
    stones: tuple[Attempt, ...] = ()
    """retrieval: best attempts of other, similar tasks."""
    repeated: tuple[int, ...] = ()
    """Candidates the previous generation's replies repeated: the prompt says so and asks for another
    program (set by the loop, not the strategy)."""

    @property
    def parent_ids(self) -> tuple[int, ...]:
        shown = ([self.current] if self.current else []) + list(self.parents) + list(self.variants)
        return tuple(dict.fromkeys(a.id for a in shown))


class Strategy(Protocol):
    def __call__(self, attempts: Sequence[Attempt], stones: Sequence[Attempt], slots: int, generation: int,
                 seed: int) -> list[Plan]: ...


def beats(new: Attempt, old: Attempt | None) -> bool:
    """`new` is faster than `old` by more than the measured spread (metrics.faster_beyond_noise):
    one noisy timing must not replace an incumbent (most frameworks score a single noisy run)."""
    if not new.timed:
        return False
    if old is None:
        return True
    assert new.candidate_ms is not None and old.candidate_ms is not None
    return faster_beyond_noise(new.candidate_ms, new.candidate_iqr_ms or 0.0, old.candidate_ms,
                               old.candidate_iqr_ms or 0.0)


def incumbent(attempts: Sequence[Attempt]) -> Attempt | None:
    """The best attempt under the acceptance rule, replayed in step order (so it is the same
    after a resume as in a run that was never stopped)."""
    best: Attempt | None = None
    for attempt in sorted(attempts, key=lambda a: (a.step, a.id)):
        if beats(attempt, best):
            best = attempt
    return best


def result_field(attempt: Attempt, key: str, default: Any = "") -> Any:
    """A field of the stored EvalResult JSON (compile log, kernels ...)."""
    result = attempt.result if isinstance(attempt.result, dict) else {}
    return result.get(key, default)
