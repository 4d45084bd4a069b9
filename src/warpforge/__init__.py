"""warpforge: make GPU code faster with LLMs and search, on an evaluation harness you can trust.

The public entry points are `load_task` (a reference program), `evaluate` (a candidate
against it) and `Judge` (many candidates against one task, set-up paid once); the command line in `cli.py` is a thin layer over them.
"""

from warpforge.candidate import Candidate, EvalResult
from warpforge.config import EvalConfig
from warpforge.errors import WarpforgeError
from warpforge.evaluate import Judge
from warpforge.evaluate import evaluate as _evaluate
from warpforge.task import Task, load_task

__version__ = "0.1.0"


# Bound after the `warpforge.evaluate` subpackage is imported, so this function (not the
# subpackage) is what `warpforge.evaluate` names from here on.
def evaluate(task: Task, candidate: Candidate, config: EvalConfig | None = None) -> EvalResult:
    """Evaluate `candidate` against `task` in sandboxed child processes (see evaluate/)."""
    return _evaluate(task, candidate, config or EvalConfig())


__all__ = ["Candidate", "EvalConfig", "EvalResult", "Judge", "Task", "WarpforgeError", "evaluate", "load_task"]
