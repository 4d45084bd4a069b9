"""The live view of `warpforge optimize`: one row per task, redrawn as the loop reports progress.

On a terminal it is a `rich` live table on stderr; otherwise (CI logs, pipes) a header line
naming the columns, then one plain line per change of a task's state or counts, so logs stay
readable. stdout is left to `--json`.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from warpforge.search.loop import TaskProgress

COLUMNS = ("task", "state", "proposed", "evaluated", "correct", "best: speed vs eager", "improved", "duplicates",
           "tokens", "cost", "last")
PLAIN = len(COLUMNS) - 2
"""Piped lines show the columns before cost and last (last's text varies too much to line up)."""


class ProgressView:
    """Use as a context manager; pass `update` to the Optimizer as `on_progress`."""

    def __init__(self, tasks: list[str], live: bool | None = None) -> None:
        self.rows: dict[str, TaskProgress] = {t: TaskProgress(t) for t in tasks}
        self.console = Console(stderr=True)
        self.live = self.console.is_terminal if live is None else live
        self._lock = threading.Lock()
        self._shown: dict[str, tuple[Any, ...]] = {}
        self._header = False
        self._live: Live | None = None

    def __enter__(self) -> ProgressView:
        if self.live:
            self._live = Live(self._table(), console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.__exit__(None, None, None)

    def update(self, progress: TaskProgress) -> None:
        with self._lock:
            self.rows[progress.task] = TaskProgress(**vars(progress))
            if self._live is not None:
                self._live.update(self._table())
                return
            key = (progress.state, progress.proposed, progress.evaluated, progress.correct, progress.best_speedup,
                   progress.improved, progress.duplicates)
            if self._shown.get(progress.task) != key:
                self._shown[progress.task] = key
                if not self._header:  # once, before the first row: what each field of a row is
                    self._header = True
                    print("  ".join(COLUMNS[:PLAIN]), file=sys.stderr, flush=True)
                print("  ".join(_cells(progress)[:PLAIN]), file=sys.stderr, flush=True)

    def _table(self) -> Table:
        table = Table(title="warpforge optimize", expand=False)
        for name in COLUMNS:
            table.add_column(name, justify="right" if name not in ("task", "state", "last") else "left",
                             overflow="fold", max_width=48 if name == "last" else None)
        for progress in self.rows.values():
            table.add_row(*_cells(progress))
        return table


def _cells(p: TaskProgress) -> list[str]:
    """One row; the best's claim and "improved" are archive.best_attempt / improves_on_eager, as everywhere."""
    return [p.task, p.state, str(p.proposed), str(p.evaluated), str(p.correct), p.best_claim,
            "yes" if p.improved else "no",
            str(p.duplicates), str(p.tokens), f"${p.cost_usd:.2f}", p.last]
