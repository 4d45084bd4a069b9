"""What each page of the HTML report shows, computed from the archive's records.

`read_archive` reads an archive through `warpforge.archive` (read-only) and shapes it for the
pages: tasks with their attempts in run order, the best kernel, tokens and cost, the runs.
`task_context` and `index_context` derive the rest: charts, the diff to the parent, the lineage,
the leaderboard's means. No SQL here (archive.py owns the schema) and no HTML (html.py, templates/).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markupsafe import Markup

from warpforge.archive import Archive, Attempt, RunRow, best_attempt, improves_on_eager
from warpforge.config import flat
from warpforge.errors import UsageError
from warpforge.metrics import geometric_mean
from warpforge.propose import duplicate_of
from warpforge.report import plots

STATUS_ORDER = ("correct", "incorrect", "compile_error", "runtime_error", "timeout", "crashed", "rejected",
                "task_error", "no_candidate", "not_evaluated")
# "propose": the LLM reply held no candidate; "pending": recorded but not evaluated yet.
STAGE_ORDER = ("propose", "static", "reference", "compile", "verify", "bench", "profile", "done", "pending")
BIG_TABLE = 200  # above this many attempts the table is folded away and the charts tell the story
MAX_DESCENDANTS = 120  # lineage nodes shown under the best kernel; the rest are counted


# ---------------------------------------------------------------- one attempt, as the pages show it


def status_of(a: Attempt) -> str:
    """The latest evaluation's status; `no_candidate` or `not_evaluated` when there is none."""
    if a.evaluation_id is not None:
        return a.status or "unknown"
    return "no_candidate" if a.source is None else "not_evaluated"


def stage_of(a: Attempt) -> str:
    """The stage the attempt ended in; `propose` (no candidate) or `pending` when not evaluated."""
    if a.evaluation_id is not None:
        return a.stage or "unknown"
    return "propose" if a.source is None else "pending"


def reason_of(a: Attempt) -> str:
    """The evaluator's sentence, or why the proposal produced no candidate."""
    return a.reason or a.failure or ""


def review_of(a: Attempt) -> str:
    if isinstance(a.review, dict):
        return ": ".join(str(a.review[k]) for k in ("verdict", "finding") if a.review.get(k))
    return "" if a.review is None else json.dumps(a.review)


def positive(v: float | None) -> float | None:
    """A speedup or time only when it is a positive finite number; anything else is 'not timed'."""
    return float(v) if isinstance(v, int | float) and math.isfinite(v) and v > 0 else None


def _best(attempts: list[Attempt]) -> Attempt | None:
    """archive.best_attempt, the number every view shows; only when nothing was timed, the first
    correct attempt, so its page still shows a verified source (with no speedup)."""
    return best_attempt(attempts) or next((a for a in attempts if a.correct), None)


def _positions(attempts: Iterable[Attempt]) -> dict[int, float]:
    """Chart x per candidate id: its step, with the task's runs (attempts in run order) laid end to
    end, so a resumed run, whose steps restart at 0, is drawn after the runs before it."""
    x: dict[int, float] = {}
    offset, run = 0, None
    for a in attempts:
        if run is not None and a.run_id != run:
            offset = int(max(x.values())) + 1
        run = a.run_id
        x[a.id] = offset + a.step
    return x


# ---------------------------------------------------------------- the archive, shaped for the pages


@dataclass(frozen=True)
class TaskView:
    name: str
    page: str
    """File name under tasks/."""
    path: str | None
    """The task file, as recorded."""
    attempts: list[Attempt]
    """In run order (runs by start time, then step)."""
    best: Attempt | None
    tokens: int
    cost_usd: float

    @property
    def correct(self) -> int:
        return sum(bool(a.correct) for a in self.attempts)

    @property
    def tried(self) -> list[Attempt]:
        """The attempts that were candidates of their own: a reply repeating an earlier one is a
        duplicate, listed but not counted (archive.task_summaries counts the same way)."""
        return [a for a in self.attempts if duplicate_of(a.failure) is None]

    @property
    def duplicates(self) -> int:
        return len(self.attempts) - len(self.tried)

    @property
    def improved(self) -> bool:
        """The best kernel beats eager PyTorch beyond the noise (archive.improves_on_eager)."""
        return self.best is not None and improves_on_eager(self.best)


@dataclass(frozen=True)
class RunView:
    run: RunRow
    summary: str
    config: str
    """The configuration as indented JSON (the stored text when it is not a JSON object)."""


@dataclass(frozen=True)
class ArchiveView:
    path: Path
    tasks: list[TaskView]
    runs: list[RunView]
    by_id: dict[int, Attempt]
    children: dict[int, list[int]]
    """Candidate id → ids of the attempts that name it as a parent."""


def unsandboxed_runs(view: ArchiveView) -> list[str]:
    """Runs whose candidates were evaluated without the OS sandbox (`--no-sandbox`): every page says so."""
    found = []
    for run in view.runs:
        try:
            config = json.loads(run.config)
        except ValueError:
            continue
        evaluation = config.get("eval") if isinstance(config, dict) else None
        if isinstance(evaluation, dict) and flat(evaluation).get("sandbox") is False:
            found.append(run.run.id)
    return found


def _page_names(names: Iterable[str]) -> dict[str, str]:
    """A file name per task: safe characters only, unique even on case-insensitive file systems."""
    pages: dict[str, str] = {}
    used: set[str] = set()
    for name in sorted(names):
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:80] or "task"
        if base.lower() in used:
            base = f"{base}-{hashlib.sha1(name.encode()).hexdigest()[:10]}"
        used.add(base.lower())
        pages[name] = base + ".html"
    return pages


def _config_summary(text: str | None) -> tuple[str, str]:
    """A one-line `key=value` summary of a run's config (scalars, one level of nesting) and the full JSON."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return (text or "")[:120], text or ""
    items: list[str] = []
    for key, v in value.items():
        nested = v.items() if isinstance(v, dict) else [("", v)]
        for sub, leaf in nested:
            if isinstance(leaf, str | int | float | bool) or leaf is None:
                items.append(f"{key}.{sub}={leaf}" if sub else f"{key}={leaf}")
    summary = " · ".join(i if len(i) <= 48 else i[:47] + "…" for i in items[:8])
    return summary + (" …" if len(items) > 8 else ""), json.dumps(value, indent=2, sort_keys=True)


def read_archive(path: Path) -> ArchiveView:
    """The archive's data, shaped for the pages; UsageError when it cannot be read."""
    with Archive(path, read_only=True) as archive:
        try:
            runs, attempts, usage = archive.runs(), archive.attempts(), archive.task_usage()
            names = archive.tasks()
            task_paths = {name: archive.task_path(name) for name in names}
        except (sqlite3.DatabaseError, json.JSONDecodeError) as exc:
            raise UsageError(f"{path} could not be read as a warpforge archive ({exc}): "
                             "check that it is not damaged") from None
    started = {r.id: r.started for r in runs}

    def run_order(a: Attempt) -> tuple[float, str, int, int]:
        when = started.get(a.run_id)
        return (a.created if when is None else when), a.run_id, a.step, a.id

    by_task: dict[str, list[Attempt]] = {name: [] for name in names}
    for a in sorted(attempts, key=run_order):
        by_task[a.task].append(a)
    pages = _page_names(names)
    tasks = [TaskView(n, pages[n], task_paths[n], by_task[n], _best(by_task[n]), *usage.get(n, (0, 0.0)))
             for n in names]
    children: dict[int, list[int]] = defaultdict(list)
    for a in attempts:
        for p in dict.fromkeys(a.parents):
            children[p].append(a.id)
    return ArchiveView(path, tasks, [RunView(r, *_config_summary(r.config)) for r in runs],
                       {a.id: a for a in attempts}, dict(children))


# ---------------------------------------------------------------- what the pages show


def _failure_mix(attempts: Iterable[Attempt]) -> Markup | None:
    by_stage: dict[str, Counter[str]] = defaultdict(Counter)
    for a in attempts:
        by_stage[stage_of(a)][status_of(a)] += 1
    if not by_stage:
        return None
    stages = [s for s in STAGE_ORDER if s in by_stage] + sorted(set(by_stage) - set(STAGE_ORDER))
    return plots.stacked_bars([(s, by_stage[s]) for s in stages], STATUS_ORDER)


def _speedup_chart(attempts: list[Attempt]) -> Markup | None:
    x = _positions(attempts)
    points = [plots.Point(x[a.id], a.speedup, f"#{a.id} step {a.step} {a.strategy}: {a.speedup:.3g}×")
              for a in attempts if a.timed and a.speedup is not None]
    if not points:
        return None
    failed = [x[a.id] for a in attempts if not a.correct]
    label = "step" if len({a.run_id for a in attempts}) == 1 else "step, with later runs drawn after earlier ones"
    return plots.speedup_scatter(points, failed, (min(x.values()), max(x.values())), label)


def _diff(parent_source: str, source: str, parent: str, child: str) -> list[tuple[str, str]]:
    """Unified diff lines, each with a CSS class (head, hunk, add, del or ctx). Only the first two
    lines are headers: a deleted `--i;` reads `---i;` and must not be taken for one."""
    lines = difflib.unified_diff(parent_source.splitlines(), source.splitlines(), parent, child, lineterm="")
    kinds = {"@": "hunk", "+": "add", "-": "del"}
    return [("head" if i < 2 else kinds.get(line[:1], "ctx"), line) for i, line in enumerate(lines)]


@dataclass(frozen=True)
class Node:
    """A lineage entry: the attempt (None when the archive lacks that id) and how to reach it."""

    id: int
    attempt: Attempt | None
    href: str
    also: tuple[Node, ...] = ()
    """In the ancestor chain: the other parents it was crossed with."""


def _node(view: ArchiveView, task: TaskView, pages: Mapping[str, str], cid: int, also: tuple[Node, ...] = ()) -> Node:
    a = view.by_id.get(cid)
    if a is None or a.task == task.name:
        return Node(cid, a, f"#c{cid}", also)
    return Node(cid, a, f"{pages[a.task]}#c{cid}", also)


def _ancestors(view: ArchiveView, task: TaskView, pages: Mapping[str, str], best: Attempt) -> list[Node]:
    """Root first, best last, following first parents; other parents ride along in `also`."""
    chain, seen, current = [], {best.id}, best
    while current.parents:
        first, *others = current.parents
        chain.append(_node(view, task, pages, first, tuple(_node(view, task, pages, p) for p in others)))
        nxt = view.by_id.get(first)
        if nxt is None or nxt.id in seen:
            break
        seen.add(nxt.id)
        current = nxt
    return chain[::-1]


@dataclass(frozen=True)
class TreeRow:
    node: Node
    depth: int
    continues: bool
    """The only child of the row above, drawn at its depth rather than one deeper."""


def _descendants(view: ArchiveView, task: TaskView, pages: Mapping[str, str], root: int) -> tuple[list[TreeRow], int]:
    """Descendants of `root`, depth first, each attempt once, and how many were left out after
    MAX_DESCENDANTS rows. Siblings indent under their parent; an only child stays at its
    parent's depth, because evolution grows long single lines that would march off the page."""
    rows: list[TreeRow] = []
    seen, left_out = {root}, 0
    stack: list[tuple[int, int, bool]] = []

    def push(parent: int, depth: int, may_continue: bool) -> None:
        children = [c for c in view.children.get(parent, []) if c not in seen]
        seen.update(children)
        only = may_continue and len(children) == 1
        stack.extend((c, depth if only else depth + 1, only) for c in reversed(children))

    push(root, -1, may_continue=False)
    while stack:
        cid, depth, continues = stack.pop()
        if len(rows) < MAX_DESCENDANTS:
            rows.append(TreeRow(_node(view, task, pages, cid), depth, continues))
        else:
            left_out += 1
        push(cid, depth, may_continue=True)
    return rows, left_out


def task_context(view: ArchiveView, task: TaskView) -> dict[str, Any]:
    """What tasks/<name>.html shows beyond the TaskView itself."""
    pages = {t.name: t.page for t in view.tasks}
    ctx: dict[str, Any] = {"task": task, "speedup_chart": _speedup_chart(task.attempts),
                           "failure_chart": _failure_mix(task.attempts), "big": len(task.attempts) > BIG_TABLE,
                           "source": None, "diff": None, "parent": None, "ancestors": ([], [], []), "descendants": [],
                           "more": 0}
    best = task.best
    if best is None:
        return ctx
    ctx["source"] = best.source or ""
    for pid in best.parents:
        parent = view.by_id.get(pid)
        if parent is not None and parent.source is not None:
            ctx["parent"] = _node(view, task, pages, pid)
            ctx["diff"] = _diff(parent.source, ctx["source"], f"#{pid}", f"#{best.id}")
            break
    chain = _ancestors(view, task, pages, best)
    # A long evolutionary chain reads as its roots and its last steps; the middle folds away.
    ctx["ancestors"] = (chain, [], []) if len(chain) <= 14 else (chain[:3], chain[3:-8], chain[-8:])
    ctx["descendants"], ctx["more"] = _descendants(view, task, pages, best.id)
    return ctx


def level_of(name: str) -> str:
    """"level1/softmax" -> "level 1"; a task outside a levelN/ folder -> "other"."""
    head = name.split("/", 1)[0]
    return f"level {head[5:]}" if len(name.split("/", 1)) == 2 and head[:5] == "level" and head[5:].isdigit() \
        else "other"


def level_rows(tasks: list[TaskView]) -> list[dict[str, Any]]:
    """One row per level (KernelBench's 1-3, in order, then "other"): tasks, tasks attempted and
    improved, the geomean of the best speedups over eager counting a task without a correct,
    timed kernel as 1x, and how many bests are custom kernels."""
    rows = []
    for level in sorted({level_of(t.name) for t in tasks}, key=lambda k: (k == "other", len(k), k)):
        group = [t for t in tasks if level_of(t.name) == level]
        attempted = [t for t in group if t.attempts]
        speedups = [positive(t.best.speedup) if t.best else None for t in attempted]
        rows.append({"level": level, "tasks": len(group), "attempted": len(attempted),
                     "improved": sum(t.improved for t in group),
                     "geomean_all": geometric_mean([s or 1.0 for s in speedups]) if attempted else None,
                     "custom": sum(bool(t.best and t.best.kernels_kind == "custom_kernel") for t in group)})
    return rows


def index_context(view: ArchiveView) -> dict[str, Any]:
    """What index.html shows beyond the ArchiveView itself."""
    attempts = [a for t in view.tasks for a in t.tried]
    bests = [t.best for t in view.tasks if t.best is not None]
    timed = [s for b in bests if (s := positive(b.speedup)) is not None]
    vs_compile = [s for b in bests if (s := positive(b.speedup_vs_compile)) is not None]
    attempted = [t for t in view.tasks if t.attempts]
    kinds = ("custom_kernel", "pytorch_rewrite", None)
    split = [(k or "not recorded", sum(a.kernels_kind == k for a in attempts if a.correct),
              sum(b.kernels_kind == k for b in bests)) for k in kinds]
    split += [(k, sum(a.kernels_kind == k for a in attempts if a.correct), sum(b.kernels_kind == k for b in bests))
              for k in sorted({a.kernels_kind for a in attempts if a.kernels_kind not in kinds and a.correct}, key=str)]
    return {
        "attempts": attempts, "split": split, "failure_chart": _failure_mix(attempts),
        "geomean": geometric_mean(timed) if timed else None, "timed": len(timed), "attempted": len(attempted),
        "improved": sum(t.improved for t in view.tasks),
        "geomean_all": geometric_mean(timed + [1.0] * (len(attempted) - len(timed))) if attempted and timed else None,
        "geomean_compile": geometric_mean(vs_compile) if vs_compile else None, "n_compile": len(vs_compile),
        "tokens": sum(t.tokens for t in view.tasks), "cost": sum(t.cost_usd for t in view.tasks),
        "levels": level_rows(view.tasks),
    }
