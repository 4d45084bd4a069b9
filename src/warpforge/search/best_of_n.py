"""Best-of-n: n independent translations of the reference; the search keeps the best verified one.

The baseline every other strategy must beat: no feedback, no memory, just samples.
"""

from __future__ import annotations

from collections.abc import Sequence

from warpforge.archive import Attempt
from warpforge.search.plan import Plan


def best_of_n(attempts: Sequence[Attempt], stones: Sequence[Attempt], slots: int, generation: int,
              seed: int) -> list[Plan]:
    return [Plan("translate") for _ in range(slots)]
