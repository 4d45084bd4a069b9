"""Search: the optimisation loop (`loop.py`) and one small module per strategy. The names below
load the loop on first use (`_lazy.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from warpforge._lazy import attributes

if TYPE_CHECKING:
    from warpforge.search.loop import Budget, OptimizeConfig, Optimizer, RunSummary, TaskOutcome, TaskProgress

__all__ = ["Budget", "OptimizeConfig", "Optimizer", "RunSummary", "TaskOutcome", "TaskProgress"]
__getattr__ = attributes(__name__, {name: "warpforge.search.loop" for name in __all__})
