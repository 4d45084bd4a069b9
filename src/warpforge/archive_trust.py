"""Imported attempts are claims, not verdicts, until this machine's evaluator has judged them.

`archive import` (report/datasets.py) records each row of an attempts export as a candidate of an
import run, with the file's verdict kept beside it as a claim (`features["imported"]`) and no
evaluation: it is never a best, a dataset row, a reward or a retrieval stepping stone. `verify`
evaluates those candidates with the real evaluator and records each evaluation; the latest
evaluation is the attempt's, so a verified one then counts like any other. Tasks come from the
operator: the suite's, or the files named on the command line, never a path an import recorded.
This module decides what is unverified and runs the verification; it stores nothing itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from warpforge.archive import Archive, Attempt, RunRow
from warpforge.candidate import Candidate, EvalResult
from warpforge.errors import WarpforgeError
from warpforge.evaluator import Evaluator
from warpforge.task import Task, load_task, suite_paths

IMPORTED = "imported"
"""The `features` key under which an imported attempt keeps what its file claimed."""


def claim_of_row(row: dict[str, Any], source: str) -> dict[str, Any]:
    """What an attempts-export row claimed (shown by `archive show`, never counted)."""
    speedup = row.get("speedup")
    return {"from": source, "status": str(row.get("status") or "")[:40],
            "speedup": float(speedup) if isinstance(speedup, int | float) and math.isfinite(speedup) else None,
            "hardware_key": str(row.get("hardware_key") or "")[:40] or None}


def suite_task(name: str) -> Task | None:
    """The built-in suite task recorded as `name` (level1/relu), else None: a suite file only,
    never a file that happens to be at that path in the current folder."""
    found = [p for p in suite_paths() if f"{p.parent.name}/{p.stem}" == name]
    return load_task(found[0]) if len(found) == 1 else None


def _is_import(run: RunRow) -> bool:
    try:
        return bool(json.loads(run.config or "{}").get("mode") == "import")
    except (ValueError, AttributeError):
        return False


def unverified(archive: Archive, tasks: Collection[str] | None = None) -> list[Attempt]:
    """Imported attempts (of `tasks`, when given) with no evaluation made here, by task then id.
    An import before claims were kept apart stored the file's verdict as an evaluation, recorded
    while its import run was open: such an evaluation is a claim too."""
    imports = {r.id: r for r in archive.runs() if _is_import(r)}
    found = [a for a in archive.attempts() if a.run_id in imports and a.source is not None
             and (tasks is None or a.task in tasks) and _claim_only(a, imports[a.run_id])]
    return sorted(found, key=lambda a: (a.task, a.id))


def _claim_only(a: Attempt, run: RunRow) -> bool:
    if a.evaluation_id is None:
        return True
    return run.finished is not None and (a.evaluated_at or 0.0) <= run.finished


def trusted(archive: Archive, attempts: Iterable[Attempt] | None = None) -> list[Attempt]:
    """`attempts` (default: all of the archive's) without the unverified imports."""
    claims = {a.id for a in unverified(archive)}
    return [a for a in (archive.attempts() if attempts is None else attempts) if a.id not in claims]


@dataclass(frozen=True)
class Verified:
    attempt: Attempt
    """As it was before (its claim in `features[IMPORTED]`, or a claimed evaluation)."""
    result: EvalResult
    """This machine's verdict, now the attempt's latest evaluation."""


def verify(archive: Archive, evaluator: Evaluator, tasks: Sequence[Task] = (),
           on_result: Callable[[Verified], None] | None = None) -> tuple[list[Verified], dict[str, str]]:
    """Evaluate every unverified import (only those of `tasks` when given; their files are the
    operator's) and record each evaluation as it arrives. Returns what was verified, and for each
    task left unverified, why (not a suite task and not named; its file differs from the program
    recorded at import; it cannot run here)."""
    named = {t.name: t for t in tasks}
    done: list[Verified] = []
    skipped: dict[str, str] = {}
    for a in unverified(archive, named or None):
        if a.task in skipped:
            continue
        task = named.get(a.task) or suite_task(a.task)
        if task is None:
            skipped[a.task] = ("not a suite task: name its task file (`warpforge archive verify PATH`) if you trust "
                               "it; a path recorded by an import is never run")
            continue
        recorded = archive.task_source(a.task)
        if recorded is not None and recorded != task.source:
            skipped[a.task] = f"{task.path} is not the program recorded at import (its source differs)"
            continue
        try:
            result = evaluator.submit(task, Candidate(a.source or "")).result()
        except WarpforgeError as exc:  # the task cannot run here: no verdict on its candidates
            skipped[a.task] = str(exc)
            continue
        archive.add_evaluation(a.id, result)
        done.append(Verified(a, result))
        if on_result is not None:
            on_result(done[-1])
    return done, skipped
