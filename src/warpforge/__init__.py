"""warpforge: make GPU code faster with LLMs and search, on an evaluation harness you can trust.

The public entry points are `load_task` (a reference program), `evaluate` (a candidate
against it) and `Judge` (many candidates against one task, set-up paid once); the command line in `cli/` is a thin layer over them.

Nothing heavy is imported here: the names below load their modules (and torch) on first use,
so `import warpforge.errors` and `warpforge --help` do not pay for torch.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from warpforge._lazy import attributes

if TYPE_CHECKING:
    from warpforge.candidate import Candidate, EvalResult
    from warpforge.config import EvalConfig
    from warpforge.errors import WarpforgeError
    from warpforge.evaluate import Judge
    from warpforge.task import Task, load_task

__version__ = "0.1.0"

# public name -> the module that defines it, imported on first use (PEP 562)
_LAZY = {"Candidate": "warpforge.candidate", "EvalResult": "warpforge.candidate", "EvalConfig": "warpforge.config",
         "WarpforgeError": "warpforge.errors", "Judge": "warpforge.evaluate", "Task": "warpforge.task",
         "load_task": "warpforge.task"}
_LAZY["apply"] = "warpforge.model.apply"  # model, report = warpforge.apply(model, archive, seams_json)


def evaluate(task: Task, candidate: Candidate, config: EvalConfig | None = None) -> EvalResult:
    """Evaluate `candidate` against `task` in sandboxed child processes (see evaluate/)."""
    from warpforge.config import EvalConfig

    run = importlib.import_module("warpforge.evaluate").evaluate
    return run(task, candidate, config or EvalConfig())  # type: ignore[no-any-return]


__getattr__ = attributes(__name__, _LAZY)


class _Package(types.ModuleType):
    """`warpforge.evaluate` stays the function above: importing the `warpforge.evaluate`
    subpackage binds it on this package, after the function was defined; that binding is
    dropped (the subpackage is in sys.modules, where `import warpforge.evaluate.x` finds it)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "evaluate" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = ["Candidate", "EvalConfig", "EvalResult", "Judge", "Task", "WarpforgeError", "evaluate", "load_task"]
