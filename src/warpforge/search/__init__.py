"""Search: the optimisation loop (`loop.py`) and one small module per strategy."""

from warpforge.search.loop import Budget, OptimizeConfig, Optimizer, RunSummary, TaskOutcome, TaskProgress

__all__ = ["Budget", "OptimizeConfig", "Optimizer", "RunSummary", "TaskOutcome", "TaskProgress"]
