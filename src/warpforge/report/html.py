"""`warpforge report ARCHIVE --out DIR`: a static, self-contained HTML site of an archive.

Reads the archive's SQLite tables directly and read-only, against the documented schema
(version 1), and writes index.html (leaderboard, geometric mean, custom-kernel vs PyTorch-rewrite
split, failure mix, runs) and tasks/<name>.html (best kernel, diff to its parent, lineage, speedup
over attempts, every attempt). Pages carry their CSS and SVG charts inline: no network when
viewed. Everything from the archive is LLM output or derived from it, so the templates escape
every value (jinja2 autoescape); only the SVG that plots.py builds is inserted as markup.
It does not write to the archive, run candidates, or re-time anything.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import math
import re
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from warpforge.errors import UsageError
from warpforge.metrics import geometric_mean
from warpforge.report import plots

SCHEMA_VERSION = "1"
REQUIRED_TABLES = frozenset({"runs", "tasks", "candidates", "evaluations"})
STATUS_ORDER = ("correct", "incorrect", "compile_error", "runtime_error", "timeout", "crashed", "rejected",
                "no_candidate", "not_evaluated")
# "propose": the LLM reply held no candidate; "pending": recorded but not evaluated yet.
STAGE_ORDER = ("propose", "static", "reference", "compile", "verify", "bench", "profile", "done", "pending")
BIG_TABLE = 200  # above this many attempts the table is folded away and the charts tell the story
MAX_DESCENDANTS = 120  # lineage nodes shown under the best kernel; the rest are counted


@dataclass(frozen=True)
class Attempt:
    """One candidate row joined with its latest evaluation (None fields: not evaluated)."""

    id: int
    run_id: str
    task: str
    step: int
    x: float
    """Position on the speedup chart: the step, with a task's runs laid end to end."""
    language: str
    parents: tuple[int, ...]
    strategy: str
    model: str
    status: str
    stage: str
    correct: bool
    reason: str
    speedup: float | None
    speedup_vs_compile: float | None
    candidate_ms: float | None
    candidate_iqr_ms: float | None
    reference_ms: float | None
    compile_ms: float | None
    kernels_kind: str | None
    hardware_key: str | None
    review: str
    tokens: int
    cost_usd: float


@dataclass(frozen=True)
class TaskView:
    name: str
    page: str
    """File name under tasks/."""
    attempts: list[Attempt]
    best: Attempt | None
    tokens: int
    cost_usd: float

    @property
    def correct(self) -> int:
        return sum(a.correct for a in self.attempts)


@dataclass(frozen=True)
class RunView:
    id: str
    status: str
    started: float | None
    finished: float | None
    seed: int | None
    summary: str
    config: str


@dataclass(frozen=True)
class ArchiveView:
    path: Path
    tasks: list[TaskView]
    runs: list[RunView]
    by_id: dict[int, Attempt]
    children: dict[int, list[int]]
    """Candidate id → ids of the attempts that name it as a parent."""


# ---------------------------------------------------------------- reading the archive


def _connect(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise UsageError(f"archive {path} does not exist: pass the path of the archive that warpforge optimize wrote")
    conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    # Stored LLM output is not guaranteed to be valid UTF-8; one bad byte must not sink the report.
    conn.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError:
        conn.close()
        raise UsageError(f"{path} is not an SQLite file: "
                         "pass the path of the archive that warpforge optimize wrote") from None
    missing = REQUIRED_TABLES - tables
    if missing:
        conn.close()
        raise UsageError(f"{path} is not a warpforge archive (it has no {', '.join(sorted(missing))} table): "
                         "pass the archive that warpforge optimize wrote")
    if "meta" in tables:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is not None and str(row[0]) != SCHEMA_VERSION:
            conn.close()
            raise UsageError(f"{path} has archive schema version {row[0]} but this report reads version "
                             f"{SCHEMA_VERSION}: use the warpforge release that wrote it")
    return conn


_ATTEMPTS_SQL = """
SELECT c.id, c.run_id, c.task, c.step, c.source IS NOT NULL AS has_source, c.language, c.parents,
       c.strategy, c.model, c.failure, c.prompt_tokens, c.completion_tokens, c.cost_usd,
       e.id AS eval_id, e.status, e.correct, e.stage, e.reason, e.speedup, e.speedup_vs_compile,
       e.candidate_ms, e.candidate_iqr_ms, e.reference_ms, e.compile_ms, e.kernels_kind, e.hardware_key, e.review
FROM candidates c
LEFT JOIN (SELECT candidate_id, MAX(id) AS id FROM evaluations GROUP BY candidate_id) latest
       ON latest.candidate_id = c.id
LEFT JOIN evaluations e ON e.id = latest.id
LEFT JOIN runs r ON r.id = c.run_id
ORDER BY c.task, COALESCE(r.started, c.created, 0), c.run_id, c.step, c.id
"""


def _json(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except (ValueError, TypeError):
        return None


def _parents(text: str | None) -> tuple[int, ...]:
    value = _json(text)
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool))


def _review(text: str | None) -> str:
    value = _json(text)
    if isinstance(value, dict):
        return ": ".join(str(value[k]) for k in ("verdict", "finding") if value.get(k))
    return text or ""


def _positive(v: Any) -> float | None:
    """A speedup or time only when it is a positive finite number; anything else is 'not timed'."""
    return float(v) if isinstance(v, int | float) and math.isfinite(v) and v > 0 else None


def _attempt(row: sqlite3.Row, x: float) -> Attempt:
    evaluated = row["eval_id"] is not None
    if evaluated:
        status, stage = row["status"] or "unknown", row["stage"] or "unknown"
    elif row["has_source"]:
        status, stage = "not_evaluated", "pending"
    else:
        status, stage = "no_candidate", "propose"
    return Attempt(
        id=row["id"], run_id=row["run_id"] or "", task=row["task"] or "", step=row["step"] or 0, x=x,
        language=row["language"] or "unknown", parents=_parents(row["parents"]),
        strategy=row["strategy"] or "", model=row["model"] or "", status=status, stage=stage,
        correct=bool(evaluated and row["correct"]), reason=row["reason"] or row["failure"] or "",
        speedup=_positive(row["speedup"]), speedup_vs_compile=_positive(row["speedup_vs_compile"]),
        candidate_ms=_positive(row["candidate_ms"]), candidate_iqr_ms=_positive(row["candidate_iqr_ms"]),
        reference_ms=_positive(row["reference_ms"]), compile_ms=_positive(row["compile_ms"]),
        kernels_kind=row["kernels_kind"], hardware_key=row["hardware_key"], review=_review(row["review"]),
        tokens=(row["prompt_tokens"] or 0) + (row["completion_tokens"] or 0), cost_usd=row["cost_usd"] or 0.0,
    )


def _read_attempts(conn: sqlite3.Connection) -> dict[str, list[Attempt]]:
    """Attempts per task in run order; x lays a task's runs end to end so resumed runs do not overlap."""
    out: dict[str, list[Attempt]] = defaultdict(list)
    offset: dict[str, int] = defaultdict(int)  # x of step 0 in the task's current run
    run_of: dict[str, str] = {}
    for row in conn.execute(_ATTEMPTS_SQL):
        task, run = row["task"] or "", row["run_id"] or ""
        previous = out[task]
        if task in run_of and run_of[task] != run:
            offset[task] = int(max(a.x for a in previous)) + 1
        run_of[task] = run
        previous.append(_attempt(row, offset[task] + (row["step"] or 0)))
    return out


def _timed(a: Attempt) -> bool:
    return a.correct and a.speedup is not None and a.candidate_ms is not None


def _best(attempts: Iterable[Attempt]) -> Attempt | None:
    """The correct, timed attempt with the highest speedup (lowest id on ties), as Archive.best
    picks it; a correct but untimed attempt only when none was timed."""
    correct = [a for a in attempts if a.correct]
    return max(correct, key=lambda a: (_timed(a), a.speedup or 0.0, -a.id), default=None)


def _usage(conn: sqlite3.Connection, attempts: Mapping[str, list[Attempt]]) -> dict[str, tuple[int, float]]:
    """Tokens and cost per task: from llm_calls (which also counts retries and reviews) when the
    archive logged calls, otherwise from the candidates' own counts."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "llm_calls" in tables and conn.execute("SELECT 1 FROM llm_calls LIMIT 1").fetchone():
        rows = conn.execute("SELECT task, SUM(COALESCE(prompt_tokens, 0) + COALESCE(completion_tokens, 0)), "
                            "SUM(COALESCE(cost_usd, 0)) FROM llm_calls GROUP BY task")
        return {r[0] or "": (int(r[1] or 0), float(r[2] or 0.0)) for r in rows}
    return {t: (sum(a.tokens for a in rows), sum(a.cost_usd for a in rows)) for t, rows in attempts.items()}


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
    value = _json(text)
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


def read_archive(path: Path) -> tuple[ArchiveView, sqlite3.Connection]:
    """The archive's data, shaped for the pages, and the open read-only connection (for sources)."""
    conn = _connect(path)
    try:
        attempts = _read_attempts(conn)
        usage = _usage(conn, attempts)
        names = set(attempts) | {r[0] for r in conn.execute("SELECT name FROM tasks") if r[0] is not None}
        pages = _page_names(names)
        tasks = [TaskView(n, pages[n], attempts.get(n, []), _best(attempts.get(n, [])), *usage.get(n, (0, 0.0)))
                 for n in sorted(names)]
        runs = [RunView(r["id"], r["status"] or "", r["started"], r["finished"], r["seed"],
                        *_config_summary(r["config"]))
                for r in conn.execute("SELECT * FROM runs ORDER BY COALESCE(started, 0), id")]
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise UsageError(f"{path} could not be read as a warpforge archive ({exc}): "
                         "check that it is not damaged") from None
    by_id = {a.id: a for rows in attempts.values() for a in rows}
    children: dict[int, list[int]] = defaultdict(list)
    for a in by_id.values():
        for p in dict.fromkeys(a.parents):
            children[p].append(a.id)
    return ArchiveView(path, tasks, runs, by_id, dict(children)), conn


def _source(conn: sqlite3.Connection, candidate_id: int) -> str | None:
    row = conn.execute("SELECT source FROM candidates WHERE id = ?", (candidate_id,)).fetchone()
    return row[0] if row else None


# ---------------------------------------------------------------- what the pages show


def _failure_mix(attempts: Iterable[Attempt]) -> Markup | None:
    by_stage: dict[str, Counter[str]] = defaultdict(Counter)
    for a in attempts:
        by_stage[a.stage][a.status] += 1
    if not by_stage:
        return None
    stages = [s for s in STAGE_ORDER if s in by_stage] + sorted(set(by_stage) - set(STAGE_ORDER))
    return plots.stacked_bars([(s, by_stage[s]) for s in stages], STATUS_ORDER)


def _speedup_chart(attempts: list[Attempt]) -> Markup | None:
    points = [plots.Point(a.x, a.speedup, f"#{a.id} step {a.step} {a.strategy}: {a.speedup:.3g}×")
              for a in attempts if _timed(a) and a.speedup is not None]
    if not points:
        return None
    failed = [a.x for a in attempts if not a.correct]
    xs = [a.x for a in attempts]
    label = "step" if len({a.run_id for a in attempts}) == 1 else "step, with later runs drawn after earlier ones"
    return plots.speedup_scatter(points, failed, (min(xs), max(xs)), label)


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


def _task_context(view: ArchiveView, conn: sqlite3.Connection, task: TaskView) -> dict[str, Any]:
    pages = {t.name: t.page for t in view.tasks}
    ctx: dict[str, Any] = {"task": task, "speedup_chart": _speedup_chart(task.attempts),
                           "failure_chart": _failure_mix(task.attempts), "big": len(task.attempts) > BIG_TABLE,
                           "source": None, "diff": None, "parent": None, "ancestors": ([], [], []), "descendants": [],
                           "more": 0, "task_row": conn.execute("SELECT path, metadata FROM tasks WHERE name = ?",
                                                               (task.name,)).fetchone()}
    best = task.best
    if best is None:
        return ctx
    ctx["source"] = _source(conn, best.id) or ""
    for pid in best.parents:
        parent_source = _source(conn, pid)
        if parent_source is not None:
            ctx["parent"] = _node(view, task, pages, pid)
            ctx["diff"] = _diff(parent_source, ctx["source"], f"#{pid}", f"#{best.id}")
            break
    chain = _ancestors(view, task, pages, best)
    # A long evolutionary chain reads as its roots and its last steps; the middle folds away.
    ctx["ancestors"] = (chain, [], []) if len(chain) <= 14 else (chain[:3], chain[3:-8], chain[-8:])
    ctx["descendants"], ctx["more"] = _descendants(view, task, pages, best.id)
    return ctx


def _index_context(view: ArchiveView) -> dict[str, Any]:
    attempts = [a for t in view.tasks for a in t.attempts]
    bests = [t.best for t in view.tasks if t.best is not None]
    timed = [b.speedup for b in bests if b.speedup is not None]
    vs_compile = [b.speedup_vs_compile for b in bests if b.speedup_vs_compile is not None]
    attempted = [t for t in view.tasks if t.attempts]
    kinds = ("custom_kernel", "pytorch_rewrite", None)
    split = [(k or "not recorded", sum(a.kernels_kind == k for a in attempts if a.correct),
              sum(b.kernels_kind == k for b in bests)) for k in kinds]
    split += [(k, sum(a.kernels_kind == k for a in attempts if a.correct), sum(b.kernels_kind == k for b in bests))
              for k in sorted({a.kernels_kind for a in attempts if a.kernels_kind not in kinds and a.correct}, key=str)]
    return {
        "attempts": attempts, "split": split, "failure_chart": _failure_mix(attempts),
        "geomean": geometric_mean(timed) if timed else None, "timed": len(timed), "attempted": len(attempted),
        "geomean_all": geometric_mean(timed + [1.0] * (len(attempted) - len(timed))) if attempted and timed else None,
        "geomean_compile": geometric_mean(vs_compile) if vs_compile else None, "n_compile": len(vs_compile),
        "tokens": sum(t.tokens for t in view.tasks), "cost": sum(t.cost_usd for t in view.tasks),
    }


# ---------------------------------------------------------------- rendering


def _speedup(v: float | None) -> str:
    return "—" if v is None else f"{v:.3g}×" if v < 1000 else f"{v:,.0f}×"


def _when(t: object) -> str:
    if not isinstance(t, int | float) or not math.isfinite(t):
        return "—" if t is None else str(t)
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("warpforge.report", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(speedup=_speedup, when=_when, ms=lambda v: "—" if v is None else f"{v:.4g} ms",
                       count=lambda v: f"{v:,}", usd=lambda v: f"${v:,.2f}" if v >= 0.01 or not v else f"${v:.4f}",
                       pct=lambda n, d: f"{100 * n / d:.0f}%" if d else "—",
                       clip=lambda s, n=240: s if len(s) <= n else s[: n - 1] + "…")
    return env


def write_report(archive_path: str | Path, out_dir: str | Path) -> Path:
    """Write index.html and tasks/<name>.html for the archive under out_dir; return index.html's path."""
    view, conn = read_archive(Path(archive_path))
    out = Path(out_dir)
    try:
        (out / "tasks").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        conn.close()
        raise UsageError(f"cannot create the report folder {out} ({exc.strerror}): pick a writable --out") from None
    env = _environment()
    common = {"view": view, "generated": time.time(), "status_colors": plots.STATUS_COLORS}
    try:
        for task in view.tasks:
            page = env.get_template("task.html").render(**common, **_task_context(view, conn, task), root="../")
            (out / "tasks" / task.page).write_text(page, encoding="utf-8")
        index = out / "index.html"
        index.write_text(env.get_template("index.html").render(**common, **_index_context(view), root=""),
                         encoding="utf-8")
    finally:
        conn.close()
    return index


def add_report_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="write a static HTML report of an archive",
                       description="Write a self-contained HTML site (leaderboard, one page per task) of ARCHIVE.")
    p.add_argument("archive", help="the SQLite archive that warpforge optimize wrote")
    p.add_argument("--out", required=True, help="folder to write index.html and tasks/ into (created if missing)")


def cmd_report(args: argparse.Namespace) -> int:
    print(write_report(args.archive, args.out))
    return 0
