"""Two process-lifetime helpers for the evaluator's child processes.

`dump_stacks_if_asked`: with WARPFORGE_TRACE_AFTER_S=N, every N seconds the child writes all
its threads' stacks to its captured output (for diagnosing a hang). `exit_now`: leave without
running atexit hooks, whose worker pools (e.g. torch.compile's) can keep a finished child alive.
"""

from __future__ import annotations

import faulthandler
import os
import sys


def dump_stacks_if_asked() -> None:
    seconds = os.environ.get("WARPFORGE_TRACE_AFTER_S")
    if seconds:
        faulthandler.dump_traceback_later(float(seconds), repeat=True, file=sys.stderr)


def exit_now(code: int = 0) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
